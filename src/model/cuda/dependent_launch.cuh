// model/cuda/dependent_launch.cuh (device code, internal to the CUDA model) —
// programmatic dependent launch (compute capability 9.0 and up; a no-op
// before it), which lets a kernel start while the one before it in the
// stream is still running.
//
// A kernel launched with the programmatic-serialization attribute may be
// scheduled once every block of the kernel before it has called
// allow_dependents() (or exited). Until it calls wait_for_prerequisites() it
// must touch nothing that kernel writes: it may only read what the stream
// did not change since the kernel before that (a model's weights). The wait
// returns when the previous kernel has completed and its writes are visible,
// exactly as if the launch had waited.
//
// The decode step's matrix products use it to stream their first weights
// while the norm, elementwise or attention kernel before them finishes.
#pragma once

#include <cuda_runtime.h>

namespace hiq::cuda {

__device__ __forceinline__ void wait_for_prerequisites() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" :::);
#endif
}

// Launches `kernel` as a programmatic dependent of the kernel before it on
// the stream: it may be scheduled while that one finishes, and calls
// wait_for_prerequisites() before reading its output.
template <typename... Params, typename... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                             cudaStream_t stream, Args... args) {
  cudaLaunchAttribute dependent{};
  dependent.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  dependent.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &dependent;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

}  // namespace hiq::cuda
