// model/cuda/dependent_launch.cuh (internal to the CUDA model) —
// programmatic dependent launch (compute capability 9.0 and up; a no-op
// before it), which lets a kernel start while the one before it in the
// stream is still running.
//
// A kernel launched with the programmatic-serialization attribute may be
// scheduled once every block of the kernel before it has called
// allow_dependents() (or exited). Every block of it calls
// wait_for_prerequisites() before it touches anything a kernel before it
// writes; before the wait it may read only what no kernel of the stream
// writes (a model's weights). The wait returns when the previous kernel has
// completed and its writes are visible, exactly as if the launch had waited;
// as that kernel completed only after its own wait returned, everything
// before it in the stream is complete too. A kernel may allow its
// dependents before its own wait, so more than two kernels of a chain can be
// resident at once, each held at its wait.
//
// A decode step's layer runs as one such chain: the matrix products stream
// their first weights and the norms read theirs while the kernel before
// finishes; the QKV finish and the split combine, which are short, let the
// kernel after them be scheduled at once, the attention after its loop.
#pragma once

#include <cuda_runtime.h>

#include "cuda/check.cuh"

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
// the stream. A failed launch is a Status naming `name`, and is taken off
// the thread's last error, so that no later check charges it to another
// kernel.
template <typename... Params, typename... Args>
Status launch_dependent(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
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
  const cudaError_t launched = cudaLaunchKernelEx(&config, kernel, args...);
  if (launched != cudaSuccess) (void)cudaGetLastError();
  return cuda_status(launched, name);
}

}  // namespace hiq::cuda
