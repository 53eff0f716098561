// model/cpu_kernels_impl.h (internal) — the kernels of cpu_kernels.h written
// once, over a vector type V of 16 float lanes that each implementation file
// defines (cpu_kernels_scalar.cc, _avx2.cc, _avx512.cc). It is included by
// those files alone, after their `#pragma GCC target`, so that it is compiled
// for their instruction set; everything in it is in an anonymous namespace, so
// no function compiled for a wider set can stand in for a baseline one at link
// time. It includes nothing: its files include what it uses before the pragma.
//
// V provides, all on 16 lanes:
//   Reg                                  the register type
//   kTokens, kRows, kTokenBlockRows      the micro-kernels' blocks (registers allow):
//                                        kTokenBlockRows rows × kTokens tokens, or
//                                        kRows rows × 1 token
//   zero(), broadcast(f)
//   load(const float*), load_bf16(const uint16_t*), load_f16(const uint16_t*)
//   fma(a, b, c)                         a · b + c, rounded once, per lane
//   sum(r)                               the tree of cpu_kernels.h
//   store(float*, r)
//   keep_in_register(r)                  a hint: r is used several times, load it once
// and may provide sum8(const Reg* eight, float* out): eight sums, each that
// tree, computed side by side.
//
// Tails (fewer than 16 elements left) go through a zeroed 16-element copy
// (load_tail_as), so V needs no masked loads.

namespace hiq::cpu::kernels {
namespace {

// How a weight type is stored: BF16 and F16 as their 16 bits.
template <WeightType kType>
using Stored = std::conditional_t<kType == WeightType::kF32, float, uint16_t>;

// 16 elements of a kType array from element i, widened to float.
template <class V, WeightType kType>
typename V::Reg load_as(const void* p, int64_t i) {
  if constexpr (kType == WeightType::kBf16) return V::load_bf16(static_cast<const uint16_t*>(p) + i);
  else if constexpr (kType == WeightType::kF16) return V::load_f16(static_cast<const uint16_t*>(p) + i);
  else return V::load(static_cast<const float*>(p) + i);
}

// The n < 16 elements from element i, then zeros: a tail, through a zeroed copy.
template <class V, WeightType kType>
typename V::Reg load_tail_as(const void* p, int64_t i, int n) {
  Stored<kType> chunk[16] = {};
  std::copy_n(static_cast<const Stored<kType>*>(p) + i, n, chunk);
  return load_as<V, kType>(chunk, 0);
}

// out[i] = sum(acc[i]) for i < N: by V::sum8 where V has it, eight at a time.
template <class V, int N>
void sums(const typename V::Reg (&acc)[N], float* out) {
  int i = 0;
  if constexpr (requires(const typename V::Reg* eight, float* o) { V::sum8(eight, o); })
    for (; i + 8 <= N; i += 8) V::sum8(acc + i, out + i);
  for (; i < N; ++i) out[i] = V::sum(acc[i]);
}

// y[t][r] for R rows from r0 and T tokens from t0: R · T dot products side by
// side (independent chains, each in the order of cpu_kernels.h), every
// 16-weight chunk widened once for the T tokens.
template <class V, WeightType kType, int R, int T>
void matmul_block(const float* x, int64_t cols, const void* w, int64_t rows, int64_t r0, int64_t t0,
                  const float* bias, float* y) {
  using Reg = typename V::Reg;
  Reg acc[R * T];  // row r, token t at r · T + t
#pragma GCC unroll 64
  for (int i = 0; i < R * T; ++i) acc[i] = V::zero();
  const int64_t full = cols / 16 * 16;
  for (int64_t i = 0; i < full; i += 16) {
    Reg wv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) wv[r] = load_as<V, kType>(w, (r0 + r) * cols + i);
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      Reg xv = V::load(x + (t0 + t) * cols + i);
      if constexpr (R > 1) V::keep_in_register(xv);  // one load for every row's multiply-add
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r * T + t] = V::fma(xv, wv[r], acc[r * T + t]);
    }
  }
  if (full < cols) {
    const int n = static_cast<int>(cols - full);
    Reg wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load_tail_as<V, kType>(w, (r0 + r) * cols + full, n);
    for (int t = 0; t < T; ++t) {
      const Reg xv = load_tail_as<V, WeightType::kF32>(x, (t0 + t) * cols + full, n);
      for (int r = 0; r < R; ++r) acc[r * T + t] = V::fma(xv, wv[r], acc[r * T + t]);
    }
  }
  float dot[R * T];
  sums<V, R * T>(acc, dot);
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t)
      y[(t0 + t) * rows + r0 + r] = dot[r * T + t] + (bias != nullptr ? bias[r0 + r] : 0.0f);
}

template <class V, WeightType kType>
void matmul_rows_typed(const float* x, int64_t m, const MatrixView& w, int64_t first_row, int64_t last_row,
                       const float* bias, float* y) {
  const int64_t cols = w.cols, rows = w.rows;
  // Rows in groups whose weights (about 256 KiB) stay in the core's cache
  // while every block of tokens passes over them.
  const int64_t group = std::max<int64_t>(V::kRows * V::kTokenBlockRows,
                                          (int64_t{256} << 10) / (cols * int64_t{sizeof(Stored<kType>)}));
  for (int64_t g0 = first_row; g0 < last_row; g0 += group) {
    const int64_t g1 = std::min(last_row, g0 + group);
    int64_t t = 0;
    for (; t + V::kTokens <= m; t += V::kTokens) {
      constexpr int kR = V::kTokenBlockRows;
      int64_t r = g0;
      for (; r + kR <= g1; r += kR) matmul_block<V, kType, kR, V::kTokens>(x, cols, w.data, rows, r, t, bias, y);
      for (; r < g1; ++r) matmul_block<V, kType, 1, V::kTokens>(x, cols, w.data, rows, r, t, bias, y);
    }
    // The tokens left (all of a decode step's): several rows at a time instead.
    for (; t < m; ++t) {
      int64_t r = g0;
      for (; r + V::kRows <= g1; r += V::kRows)
        matmul_block<V, kType, V::kRows, 1>(x, cols, w.data, rows, r, t, bias, y);
      for (; r < g1; ++r) matmul_block<V, kType, 1, 1>(x, cols, w.data, rows, r, t, bias, y);
    }
  }
}

template <class V>
void matmul_rows(const float* x, int64_t m, const MatrixView& w, int64_t first_row, int64_t last_row,
                 const float* bias, float* y) {
  switch (w.type) {
    case WeightType::kBf16: return matmul_rows_typed<V, WeightType::kBf16>(x, m, w, first_row, last_row, bias, y);
    case WeightType::kF16: return matmul_rows_typed<V, WeightType::kF16>(x, m, w, first_row, last_row, bias, y);
    case WeightType::kF32: return matmul_rows_typed<V, WeightType::kF32>(x, m, w, first_row, last_row, bias, y);
  }
}

// out[j + r] = dot(q, k.row(j + r)) for R keys side by side.
template <class V, int R>
void dots_block(const float* q, const Bf16Rows& k, int64_t j, int n, float* out) {
  using Reg = typename V::Reg;
  const uint16_t* rows[R];
  Reg acc[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    rows[r] = k.row(j + r);
    acc[r] = V::zero();
  }
  const int full = n / 16 * 16;
  for (int i = 0; i < full; i += 16) {
    Reg qv = V::load(q + i);
    if constexpr (R > 1) V::keep_in_register(qv);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r] = V::fma(qv, V::load_bf16(rows[r] + i), acc[r]);
  }
  if (full < n) {
    const Reg qv = load_tail_as<V, WeightType::kF32>(q, full, n - full);
    for (int r = 0; r < R; ++r) acc[r] = V::fma(qv, load_tail_as<V, WeightType::kBf16>(rows[r], full, n - full), acc[r]);
  }
  sums<V, R>(acc, out);
}

template <class V>
void dots(const float* q, const Bf16Rows& k, int64_t first, int64_t count, int n, float* out) {
  int64_t j = 0;
  for (; j + V::kRows <= count; j += V::kRows) dots_block<V, V::kRows>(q, k, first + j, n, out + j);
  for (; j < count; ++j) dots_block<V, 1>(q, k, first + j, n, out + j);
}

// Up to kGroup · 16 output elements from d0 at a time (n of them in all), over every j.
template <class V>
void weighted_sum(const float* p, const Bf16Rows& v, int64_t first, int64_t count, int n, float* out) {
  using Reg = typename V::Reg;
  constexpr int kGroup = 4;
  for (int d0 = 0; d0 < n; d0 += kGroup * 16) {
    const int chunks = std::min(kGroup, (n - d0 + 15) / 16);
    Reg acc[kGroup];
    for (int g = 0; g < kGroup; ++g) acc[g] = V::zero();
    for (int64_t j = 0; j < count; ++j) {
      const Reg pj = V::broadcast(p[j]);
      const uint16_t* vj = v.row(first + j) + d0;
      for (int g = 0; g < chunks; ++g) {
        const int left = n - d0 - g * 16;
        const Reg vv = left >= 16 ? V::load_bf16(vj + g * 16) : load_tail_as<V, WeightType::kBf16>(vj, g * 16, left);
        acc[g] = V::fma(pj, vv, acc[g]);
      }
    }
    for (int g = 0; g < chunks; ++g) {
      const int left = n - d0 - g * 16;
      if (left >= 16) {
        V::store(out + d0 + g * 16, acc[g]);
      } else {
        alignas(64) float tmp[16];
        V::store(tmp, acc[g]);
        for (int i = 0; i < left; ++i) out[d0 + g * 16 + i] = tmp[i];
      }
    }
  }
}

template <class V>
Table make_table(const char* name) {
  return Table{name, &matmul_rows<V>, &dots<V>, &weighted_sum<V>};
}

}  // namespace
}  // namespace hiq::cpu::kernels
