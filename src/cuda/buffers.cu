#include "cuda/buffers.h"

#include "cuda/check.cuh"
#include "cuda/device.h"

namespace hiq::cuda {

Status cuda_error(cudaError_t err, const std::string& what) { return cuda_status(err, what.c_str()); }

Result<DeviceMemory> device_alloc(size_t bytes, const char* what) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return resource_exhausted(std::string(what) + ": the GPU has no " + std::to_string(bytes) + " bytes free");
  }
  HIQ_RETURN_IF_ERROR(cuda_status(err, what));
  return DeviceMemory(p);
}

Result<PinnedMemory> pinned_alloc(size_t bytes, const char* what) {
  void* p = nullptr;
  const cudaError_t err = cudaMallocHost(&p, bytes == 0 ? 1 : bytes);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return resource_exhausted(std::string(what) + ": cannot pin " + std::to_string(bytes) + " bytes of host memory");
  }
  HIQ_RETURN_IF_ERROR(cuda_status(err, what));
  return PinnedMemory(p);
}

Result<Stream> make_stream() {
  cudaStream_t s = nullptr;
  HIQ_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(s);
}

Result<Event> make_event(bool timing) {
  cudaEvent_t e = nullptr;
  HIQ_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return Event(e);
}

Status require_gpu() {
  HIQ_ASSIGN_OR_RETURN(std::vector<GpuInfo> gpus, query_gpus());
  (void)gpus;
  return Status::ok();
}

}  // namespace hiq::cuda
