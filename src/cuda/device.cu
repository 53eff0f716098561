#include "cuda/device.h"

#include <cuda_runtime.h>

#include "cuda/check.cuh"

namespace hiq::cuda {

bool backend_built() { return true; }

Result<Versions> versions() {
  Versions v;
  HIQ_RETURN_IF_ERROR(cuda_status(cudaRuntimeGetVersion(&v.runtime), "cudaRuntimeGetVersion"));
  HIQ_RETURN_IF_ERROR(cuda_status(cudaDriverGetVersion(&v.driver), "cudaDriverGetVersion"));
  if (v.driver == 0) return unavailable("no CUDA driver is loaded");
  return v;
}

Result<std::vector<GpuInfo>> query_gpus() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  // Any failure to count devices (no device, no or stub driver, a driver older
  // than the runtime, devices busy) means no GPU is usable here, not a bug.
  if (err != cudaSuccess || count == 0) {
    (void)cudaGetLastError();  // clear the error for later calls
    return unavailable(std::string("no usable CUDA device: ") +
                       (err == cudaSuccess ? "none found" : cudaGetErrorString(err)));
  }
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    HIQ_RETURN_IF_ERROR(cuda_status(cudaGetDeviceProperties(&p, i), "cudaGetDeviceProperties"));
    GpuInfo g;
    g.index = i;
    g.name = p.name;
    g.compute_major = p.major;
    g.compute_minor = p.minor;
    g.multiprocessors = p.multiProcessorCount;
    g.global_memory_bytes = p.totalGlobalMem;
    g.l2_cache_bytes = static_cast<size_t>(p.l2CacheSize);
    g.shared_memory_per_block_optin = p.sharedMemPerBlockOptin;
    g.can_map_host_memory = p.canMapHostMemory != 0;
    g.async_engines = p.asyncEngineCount;
    g.concurrent_copy_and_kernel = p.asyncEngineCount > 0;
    gpus.push_back(std::move(g));
  }
  return gpus;
}

}  // namespace hiq::cuda
