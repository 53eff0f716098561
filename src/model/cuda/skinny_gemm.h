// model/cuda/skinny_gemm.h (internal to the CUDA model) — y[m][n] = x[m][k] ·
// w[n][k]ᵀ for the few rows of a decode step (m ≤ kSkinnyMaxRows).
//
// Such a product reads the whole weight matrix to use each element m times:
// it is bound by how fast the weights stream from device memory, and what
// matters is keeping enough loads in flight, not the tensor cores' rate.
// Each block owns 16 output columns (16 weight rows) and its 8 warps split
// the reduction over k; every warp streams its share of the 16 rows with
// 16-byte loads, several chunks in flight, and multiplies them on the tensor
// cores (mma.sync m16n8k16: the 16 weight rows as A, 8 rows of x as B). The
// warps' partial sums meet in shared memory and are added in warp order, so
// the result is the same bits run after run, and a row's result does not
// depend on the other rows of the batch.
//
// BF16 in, FP32 accumulation, BF16 or FP32 out, rounded once: what cuBLAS
// computes, in another order of summation.
//
// A decode step's layer is mostly these products, and the steps between them
// (the RMSNorms, the residual adds, the SiLU gate) are too small to pay for
// kernels of their own. So the kernel can fuse them (SkinnyFusion): it
// normalises x as it stages it in shared memory, adds its product into the
// residual stream, or multiplies the gate by the up projection before it
// stores — each with the bits of the kernel it replaces (layer_steps.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <library_types.h>

#include "core/status.h"

namespace hiq::cuda {

inline constexpr int kSkinnyMaxRows = 32;

// What a product computes around its multiply-adds.
struct SkinnyFusion {
  // x is the residual stream: the product reads each row RMS-normalised and
  // scaled by norm_weight[k] (16-byte aligned), as launch_add_rms_norm writes
  // it. null: x as it is.
  const __nv_bfloat16* norm_weight = nullptr;
  float norm_eps = 0.f;
  // y (BF16) is the residual stream: y += the product, rounded to BF16 first,
  // as launch_add_rms_norm adds a layer's output.
  bool add_to_y = false;
  // w has 2n rows, the gate projection's n then the up projection's n, and
  // y[m][n] (BF16) = silu(x·gateᵀ)·(x·upᵀ), each product rounded to BF16
  // first, as launch_silu_mul computes it from the unfused product.
  bool silu_gate = false;
};

// Whether the kernel takes this product: 1 ≤ m ≤ kSkinnyMaxRows, k a
// multiple of 32, every operand 16-byte aligned, y BF16 or FP32.
bool skinny_gemm_supports(const void* x, int m, const void* w, int k, const void* y, cudaDataType_t y_type);

// Whether it can fuse `fusion` into a product of m rows over k: one
// epilogue at most, a BF16 output for either, and x small enough to stage in
// shared memory for the norm (m · k ≤ about 48 Ki elements).
bool skinny_fusion_supports(int m, int k, const SkinnyFusion& fusion, cudaDataType_t y_type);

Status launch_skinny_gemm(const __nv_bfloat16* x, int m, const __nv_bfloat16* w, int n, int k, void* y,
                          cudaDataType_t y_type, cudaStream_t stream, const SkinnyFusion& fusion = {});

}  // namespace hiq::cuda
