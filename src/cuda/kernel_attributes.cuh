// cuda/kernel_attributes.cuh — a kernel's dynamic shared memory limit, raised
// on each device that launches it.
//
// A kernel's attributes live in each device's context: raised once per
// process, a kernel launched later on another GPU (a tensor-parallel rank)
// would fail with more than 48 KB. So the limit is raised once per (kernel,
// device), and remembered.
#pragma once

#include <cuda_runtime.h>

#include <mutex>
#include <set>
#include <utility>

#include "core/status.h"
#include "cuda/check.cuh"

namespace hiq::cuda {

template <typename Kernel>
Status allow_dynamic_shared_memory(Kernel* kernel, int bytes) {
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> raised;  // (kernel, device)
  int device = 0;
  HIQ_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  const std::pair<const void*, int> key{reinterpret_cast<const void*>(kernel), device};
  std::lock_guard lock(mutex);
  if (raised.contains(key)) return Status::ok();
  HIQ_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  raised.insert(key);
  return Status::ok();
}

}  // namespace hiq::cuda
