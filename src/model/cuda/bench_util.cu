#include "model/cuda/bench_util.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "cuda/check.cuh"

namespace hiq::cuda {

std::vector<int32_t> random_prompt(size_t n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = pick(rng);
  return t;
}

std::vector<uint32_t> slot_range(size_t n, size_t first) {
  std::vector<uint32_t> s(n);
  std::iota(s.begin(), s.end(), static_cast<uint32_t>(first));
  return s;
}

Result<DeviceMemory> random_device_bf16(size_t n, uint32_t seed, float stddev, const char* what) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, stddev);
  // Made on the host a chunk at a time (a large matrix repeats its first 16 Mi values).
  std::vector<__nv_bfloat16> host(std::min<size_t>(n, size_t{1} << 24));
  for (auto& x : host) x = __float2bfloat16_rn(normal(rng));
  HIQ_ASSIGN_OR_RETURN(DeviceMemory memory, device_alloc(n * sizeof(__nv_bfloat16), what));
  for (size_t at = 0; at < n; at += host.size()) {
    const size_t count = std::min(host.size(), n - at);
    HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(static_cast<__nv_bfloat16*>(memory.get()) + at, host.data(),
                                        count * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
  }
  return Result<DeviceMemory>(std::move(memory));
}

Result<double> median_event_seconds(const std::function<Status(int)>& call, int per_batch, double budget,
                              cudaStream_t stream) {
  for (int i = 0; i < per_batch; ++i) HIQ_RETURN_IF_ERROR(call(i));  // warm-up: plans, clocks
  HIQ_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  cudaEvent_t start = nullptr, stop = nullptr;
  HIQ_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  HIQ_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
  std::vector<double> times;
  double spent = 0;
  Status status;
  while (status.is_ok() && (times.size() < 5 || (times.size() < 200 && spent < budget))) {
    status = cuda_status(cudaEventRecord(start, stream), "cudaEventRecord");
    for (int i = 0; status.is_ok() && i < per_batch; ++i) status = call(i);
    if (status.is_ok()) status = cuda_status(cudaEventRecord(stop, stream), "cudaEventRecord");
    if (status.is_ok()) status = cuda_status(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    if (status.is_ok()) status = cuda_status(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    times.push_back(ms * 1e-3 / per_batch);
    spent += ms * 1e-3;
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  HIQ_RETURN_IF_ERROR(status);
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    norm += double{b[i]} * b[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

Result<std::vector<float>> download_floats(const void* device, size_t n, bool fp32) {
  std::vector<float> out(n);
  if (fp32) {
    HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(out.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost));
    return out;
  }
  std::vector<__nv_bfloat16> host(n);
  HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(host.data(), device, n * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) out[i] = __bfloat162float(host[i]);
  return out;
}

}  // namespace hiq::cuda
