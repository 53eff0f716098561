// model/cuda/layer_steps.cuh (device code, internal to the CUDA model) — the
// row-wise steps of a layer that more than one kernel computes: the RMSNorm
// and the SiLU gate. The elementwise kernels (model_kernels.cu) run them on
// their own; the decode products (skinny_gemm.cu) fuse them into their
// prologue or epilogue. Both give the same bits, because both compute them
// here, in one order.
//
// The RMSNorm's order: a block of kRmsThreads threads; thread t takes the row's 16-byte
// chunks t, t + kRmsThreads, …, and adds each chunk's squares pair by pair
// (rms_add_squares); each warp then sums its lanes by butterfly, and one
// thread adds the warps' sums in warp order (rms_block_sum). Several rows are
// reduced side by side, each in that order.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace hiq::cuda {

inline constexpr int kRmsThreads = 256;

// Eight BF16 values: one 16-byte access.
struct alignas(16) Bf16x8 {
  __nv_bfloat162 v[4];
};

// Whether 16-byte accesses (Bf16x8) may start at p; a null pointer, which
// nothing reads, counts as aligned.
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

__device__ __forceinline__ float round_to_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

__device__ __forceinline__ void rms_add_squares(const Bf16x8& v, float& squares) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __bfloat1622float2(v.v[j]);
    squares += f.x * f.x + f.y * f.y;
  }
}

// Σ over the block of each row's partial sums: squares[r] for r < kRows in,
// 1/rms (the factor the row is scaled by) out, in rstd[r] of shared memory,
// visible to the whole block on return. Called by all kRmsThreads threads.
template <int kRows>
__device__ __forceinline__ void rms_block_sum(float (&squares)[kRows], int width, float eps, float* rstd) {
  constexpr int kWarps = kRmsThreads / 32;
  __shared__ float partial[kWarps][kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float v = squares[r];
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32][r] = v;
  }
  __syncthreads();
  if (threadIdx.x < kRows) {
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += partial[w][threadIdx.x];
    rstd[threadIdx.x] = rsqrtf(total / static_cast<float>(width) + eps);
  }
  __syncthreads();
}

// One normalised element, as transformers' Qwen3RMSNorm rounds it in BF16:
// bf16(bf16(x · rstd) · weight).
__device__ __forceinline__ float rms_scale(float x, float rstd, float weight) {
  return round_to_bf16(x * rstd) * weight;
}

// The MLP's gate, with the reference's roundings: bf16(bf16(silu(gate)) · up),
// gate and up being BF16 values.
__device__ __forceinline__ float silu_times(float gate, float up) {
  return round_to_bf16(gate / (1.f + expf(-gate))) * up;
}

}  // namespace hiq::cuda
