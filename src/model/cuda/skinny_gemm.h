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
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <library_types.h>

#include "core/status.h"

namespace hiq::cuda {

inline constexpr int kSkinnyMaxRows = 32;

// Whether the kernel takes this product: 1 ≤ m ≤ kSkinnyMaxRows, k a
// multiple of 32, every operand 16-byte aligned, y BF16 or FP32.
bool skinny_gemm_supports(const void* x, int m, const void* w, int k, const void* y, cudaDataType_t y_type);

Status launch_skinny_gemm(const __nv_bfloat16* x, int m, const __nv_bfloat16* w, int n, int k, void* y,
                          cudaDataType_t y_type, cudaStream_t stream);

}  // namespace hiq::cuda
