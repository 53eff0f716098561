// cuda/check.cuh — every CUDA call is checked: a failure becomes a Status that
// names the call, the error and the source location.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/status.h"

namespace hiq::cuda {

inline Status cuda_status(cudaError_t err, const char* what, const char* file = __builtin_FILE(),
                          int line = __builtin_LINE()) {
  if (err == cudaSuccess) return Status::ok();
  return internal_error(std::string(what) + " failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                        ") at " + file + ":" + std::to_string(line));
}

}  // namespace hiq::cuda

#define HIQ_CUDA_RETURN_IF_ERROR(call) HIQ_RETURN_IF_ERROR(::hiq::cuda::cuda_status((call), #call))
