// model/cuda/attention_device.cuh (device code, internal to the CUDA model) —
// the small device helpers both attention kernels use: shared-memory
// addresses, asynchronous 16-byte copies, the exponent and BF16 packing.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace hiq::cuda::attention_device {

inline constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes from global to shared memory, or zeros when !valid (rows past the
// context: their P is 0, but 0 · NaN from stale slot memory would not be).
__device__ __forceinline__ void copy16_async(uint32_t smem, const void* global, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(global), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// 2^x on the special-function unit (exact at −inf: 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

}  // namespace hiq::cuda::attention_device
