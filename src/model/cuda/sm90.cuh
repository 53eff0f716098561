// model/cuda/sm90.cuh (internal to the CUDA model) — what the Hopper kernels
// (attention_sm90.cu, gemm_sm90.cu) share: the shared-memory matrix
// descriptor and the fences of the warpgroup tensor-core instructions
// (wgmma), the mbarriers that pipelines wait on, the bulk tensor copy and the
// driver's tensor-map encoder.
//
// Only translation units built for sm_90a include it (src/CMakeLists.txt);
// the device functions exist only in their sm_90a device pass.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums only: the encoder comes through the runtime
#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define HIQ_SM90A_DEVICE 1
#endif

namespace hiq::cuda {

// cuTensorMapEncodeTiled from the driver, through the runtime (no link to libcuda).
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
Result<EncodeTiled> encode_tiled();

namespace sm90 {

// A shared-memory matrix descriptor for a 128-byte-swizzled operand: start
// address, leading and stride byte offsets (in 16-byte units), swizzle mode 1.
// In a swizzled tile of 64-element (128-byte) rows, row r's 16-byte chunk c
// sits at chunk c ^ (r mod 8); tiles start on 1 KB, since the swizzle is a
// function of the address bits.
__device__ __forceinline__ uint64_t descriptor(uint32_t address, uint32_t leading_bytes, uint32_t stride_bytes) {
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) | static_cast<uint64_t>((leading_bytes >> 4) & 0x3FFF) << 16 |
         static_cast<uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32 | uint64_t{1} << 62;
}

#ifdef HIQ_SM90A_DEVICE
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N of this warpgroup's committed groups are in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void wgmma_wait_all() { wgmma_wait<0>(); }

__device__ __forceinline__ void mbarrier_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the bulk copies (the async proxy).
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the barrier's phase of this parity has completed. A barrier
// starts in phase 0, so a wait on parity 1 returns at once: the phase before
// counts as complete.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Arrives and adds `bytes` to the copies the barrier's phase waits for.
__device__ __forceinline__ void mbarrier_expect_bytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// One box of a 2-D tensor map (inner coordinate c0, outer c1) into shared
// memory, counted against `bar`'s expected bytes.
__device__ __forceinline__ void bulk_copy_2d(uint32_t dst, const CUtensorMap& map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
// The same for a 3-D tensor map.
__device__ __forceinline__ void bulk_copy_3d(uint32_t dst, const CUtensorMap& map, int c0, int c1, int c2,
                                             uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

// Pins accumulator registers at this point of the program: the compiler may
// not move their reads above a wgmma wait, nor their writes below an issue.
template <int N>
__device__ __forceinline__ void fence_registers(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
#endif

}  // namespace sm90
}  // namespace hiq::cuda
