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
  (void)cudaGetLastError();  // clear the error for later calls
  // kUnavailable only where no GPU is to be had: no device, or no driver (none
  // loaded, or the toolkit's stub, which reports version 0). Any other failure
  // (a driver older than the runtime, devices busy or lost) is a broken GPU
  // machine, and says so as an error: GPU tests fail on it instead of skipping.
  if (err == cudaSuccess && count == 0) return unavailable("no usable CUDA device: none found");
  if (err == cudaErrorNoDevice) return unavailable(std::string("no usable CUDA device: ") + cudaGetErrorString(err));
  if (err != cudaSuccess) {
    int driver = 0;
    if (cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0)
      return unavailable(std::string("no usable CUDA device: no CUDA driver is loaded (") +
                         cudaGetErrorString(err) + ")");
    return cuda_status(err, "cudaGetDeviceCount");
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
