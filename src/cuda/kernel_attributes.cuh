// cuda/kernel_attributes.cuh — a kernel's dynamic shared memory limit, raised
// on each device that launches it.
//
// A kernel's attributes live in each device's context: raised once per
// process, a kernel launched later on another GPU (a tensor-parallel rank)
// would fail with more than 48 KB. So the limit is raised once per (kernel,
// device) and remembered in a bit per device, read without a lock on the
// launch path.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "core/status.h"
#include "cuda/check.cuh"

namespace hiq::cuda {

template <auto Kernel>
Status allow_dynamic_shared_memory(int bytes) {
  static std::atomic<uint64_t> raised{0};  // bit d: done on device d (devices 0 … 63; others every time)
  int device = 0;
  HIQ_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (raised.load(std::memory_order_acquire) & bit) != 0) return Status::ok();
  HIQ_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  raised.fetch_or(bit, std::memory_order_release);
  return Status::ok();
}

}  // namespace hiq::cuda
