#include "codec/cuda/convert.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "cuda/check.cuh"

namespace hiq::cuda {
namespace {

__global__ void float_to_bf16_kernel(const float* in, uint16_t* out, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(in[i]));
}

__global__ void float_to_e4m3_kernel(const float* in, uint8_t* out, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    out[i] = __nv_cvt_float_to_fp8(in[i], __NV_SATFINITE, __NV_E4M3);
}

__global__ void e4m3_to_float_kernel(const uint8_t* in, float* out, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    out[i] = __half2float(__half(__nv_cvt_fp8_to_halfraw(in[i], __NV_E4M3)));
}

// Device memory freed when the probe returns, whatever happened.
template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  ~DeviceArray() { (void)cudaFree(ptr); }
};

// Copies `in` to the device, runs `launch(d_in, d_out)`, copies the result back.
template <typename In, typename Out, typename Launch>
Status run_probe(const In* in, Out* out, size_t n, Launch launch) {
  if (n == 0) return Status::ok();
  DeviceArray<In> d_in;
  DeviceArray<Out> d_out;
  HIQ_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_in.ptr, n * sizeof(In)));
  HIQ_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_out.ptr, n * sizeof(Out)));
  HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(d_in.ptr, in, n * sizeof(In), cudaMemcpyHostToDevice));
  launch(d_in.ptr, d_out.ptr);
  HIQ_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(out, d_out.ptr, n * sizeof(Out), cudaMemcpyDeviceToHost));
  return Status::ok();
}

constexpr int kThreads = 256;
unsigned blocks_for(size_t n) { return static_cast<unsigned>(std::min<size_t>((n + kThreads - 1) / kThreads, 4096)); }

}  // namespace

Status probe_float_to_bf16(const float* in, uint16_t* out, size_t n) {
  return run_probe(in, out, n, [n](const float* d_in, uint16_t* d_out) {
    float_to_bf16_kernel<<<blocks_for(n), kThreads>>>(d_in, d_out, n);
  });
}

Status probe_float_to_e4m3(const float* in, uint8_t* out, size_t n) {
  return run_probe(in, out, n, [n](const float* d_in, uint8_t* d_out) {
    float_to_e4m3_kernel<<<blocks_for(n), kThreads>>>(d_in, d_out, n);
  });
}

Status probe_e4m3_to_float(const uint8_t* in, float* out, size_t n) {
  return run_probe(in, out, n, [n](const uint8_t* d_in, float* d_out) {
    e4m3_to_float_kernel<<<blocks_for(n), kThreads>>>(d_in, d_out, n);
  });
}

}  // namespace hiq::cuda
