// model/cpu_kernels.h (internal to the model module) — the inner loops of the
// CPU forward pass: matrix rows times activations, and the two halves of an
// attention row. cpu_ops.cc splits the work across threads; these compute it.
//
// Each has one summation order, written down here, and every implementation
// (the scalar reference, AVX2 + FMA, AVX-512) follows it operation for
// operation, so they give the same bits — on any machine, on any number of
// threads, for any batch of tokens a row is computed in:
//
//   dot(a, b, n): sixteen partial sums, lane l taking the terms i ≡ l (mod 16)
//   in increasing i, each added by a fused multiply-add (one rounding); the
//   terms past n, up to a multiple of 16, are 0 · 0. Then the lanes are
//   added as a tree: l + (l + 8) for l < 8, then l + (l + 4) for l < 4,
//   then l + (l + 2) for l < 2, then lane 0 + lane 1.
//
//   weighted_sum(p, v, n, out): out[d] = Σ_j p[j] · v_j[d]
//   for j in increasing order, each term added by a fused multiply-add,
//   from 0.
//
// A matrix product's output y[t][r] is dot(x_t, w_r) + bias[r] (or + 0; one
// more rounding), with w_r widened exactly to float (BF16 and F16 weights
// are read as they are stored, F32 as it is). Attention reads K and V as L1
// holds them, BF16 rows found by slot, widened exactly.
#pragma once

#include <cstdint>

#include "model/cpu_ops.h"

namespace hiq::cpu::kernels {

// y[t][r] for t < m and first_row ≤ r < last_row, y being [m][w.rows] and x
// [m][w.cols]; bias null or [w.rows] floats.
using MatmulRowsFn = void (*)(const float* x, int64_t m, const MatrixView& w, int64_t first_row, int64_t last_row,
                              const float* bias, float* y);
// BF16 rows of a plane, row j at base + index[j] · stride (index null: j · stride).
struct Bf16Rows {
  const uint16_t* base = nullptr;
  const uint32_t* index = nullptr;
  int64_t stride = 0;  // elements
  const uint16_t* row(int64_t j) const { return base + (index != nullptr ? int64_t{index[j]} : j) * stride; }
};
// out[j] = dot(q, k.row(first + j), n) for j < count.
using DotsFn = void (*)(const float* q, const Bf16Rows& k, int64_t first, int64_t count, int n, float* out);
// out[d] = Σ_j p[j] · v.row(first + j)[d] for d < n, as above (out is
// written, not accumulated into).
using WeightedSumFn = void (*)(const float* p, const Bf16Rows& v, int64_t first, int64_t count, int n, float* out);

struct Table {
  const char* name;
  MatmulRowsFn matmul_rows;
  DotsFn dots;
  WeightedSumFn weighted_sum;
};

const Table& scalar_table();
// Null where the build has no such path or the CPU lacks its instructions.
const Table* avx2_table();    // AVX2 + FMA + F16C
const Table* avx512_table();  // AVX-512 F

// The fastest table this CPU runs: what the forward pass uses.
const Table& best_table();

}  // namespace hiq::cpu::kernels
