// `hiq bench gemm` (model/gemm_bench.h).
#include <algorithm>
#include <cmath>
#include <random>

#include "cuda/buffers.h"
#include "cuda/check.cuh"
#include "cuda/device.h"
#include "model/cuda/gemm.h"
#include "model/gemm_bench.h"

namespace hiq {
namespace {

using bf16 = __nv_bfloat16;

// Random BF16 values in device memory, made on the host once per size.
Result<cuda::DeviceMemory> random_device_bf16(size_t n, uint32_t seed, const char* what) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 0.05f);
  std::vector<bf16> host(std::min<size_t>(n, size_t{1} << 24));
  for (auto& x : host) x = __float2bfloat16_rn(normal(rng));
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory memory, cuda::device_alloc(n * sizeof(bf16), what));
  for (size_t at = 0; at < n; at += host.size()) {
    const size_t count = std::min(host.size(), n - at);
    HIQ_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(static_cast<bf16*>(memory.get()) + at, host.data(), count * sizeof(bf16), cudaMemcpyHostToDevice));
  }
  return Result<cuda::DeviceMemory>(std::move(memory));
}

// Median seconds per call of `call(i)` over batches of `per_batch` calls, by CUDA events.
Result<double> median_seconds(const std::function<Status(int)>& call, int per_batch, double budget,
                              cudaStream_t stream) {
  for (int i = 0; i < per_batch; ++i) HIQ_RETURN_IF_ERROR(call(i));  // warm-up: plans, clocks
  HIQ_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  cudaEvent_t start = nullptr, stop = nullptr;
  HIQ_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  HIQ_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
  std::vector<double> times;
  double spent = 0;
  Status status;
  while (status.is_ok() && (times.size() < 5 || (times.size() < 100 && spent < budget))) {
    status = cuda::cuda_status(cudaEventRecord(start, stream), "cudaEventRecord");
    for (int i = 0; status.is_ok() && i < per_batch; ++i) status = call(i);
    if (status.is_ok()) status = cuda::cuda_status(cudaEventRecord(stop, stream), "cudaEventRecord");
    if (status.is_ok()) status = cuda::cuda_status(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    if (status.is_ok()) status = cuda::cuda_status(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    times.push_back(ms * 1e-3 / per_batch);
    spent += ms * 1e-3;
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  HIQ_RETURN_IF_ERROR(status);
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

Result<std::vector<float>> download(const void* y, size_t n, bool fp32) {
  std::vector<float> out(n);
  if (fp32) {
    HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(out.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
    return out;
  }
  std::vector<bf16> host(n);
  HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(host.data(), y, n * sizeof(bf16), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) out[i] = __bfloat162float(host[i]);
  return out;
}

}  // namespace

Result<GemmBenchReport> run_gemm_bench(const GemmBenchOptions& o, const std::function<void(size_t, size_t)>& progress) {
  if (o.rows.empty()) return invalid_argument("bench gemm: no row counts");
  for (int m : o.rows)
    if (m < 1 || m > 4096) return invalid_argument("bench gemm: row counts must be in 1 … 4096");
  if (o.hidden <= 0 || o.q_out <= 0 || o.kv_out <= 0 || o.intermediate <= 0 || o.vocab <= 0)
    return invalid_argument("bench gemm: the model's sizes must be positive");
  HIQ_ASSIGN_OR_RETURN(const std::vector<cuda::GpuInfo> gpus, cuda::query_gpus());
  GemmBenchReport report;
  report.gpu = gpus.front().name;
  int device = 0, l2_bytes = 0;
  HIQ_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  HIQ_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
  HIQ_ASSIGN_OR_RETURN(cuda::Stream stream, cuda::make_stream());
  constexpr size_t kWorkspace = size_t{32} << 20;
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory workspace, cuda::device_alloc(kWorkspace, "cuBLAS workspace"));
  HIQ_ASSIGN_OR_RETURN(cuda::Gemms gemms, cuda::Gemms::create(stream.get(), workspace.get(), kWorkspace));

  struct Product {
    const char* name;
    int n, k;
    bool fp32;  // the LM head's logits
  };
  const std::vector<Product> products = {{"qkv", o.q_out + 2 * o.kv_out, o.hidden, false},
                                         {"o_proj", o.hidden, o.q_out, false},
                                         {"gate_up", 2 * o.intermediate, o.hidden, false},
                                         {"down", o.hidden, o.intermediate, false},
                                         {"lm_head", o.vocab, o.hidden, true}};
  // Enough copies of each matrix that a rotation through them is four times the L2 cache.
  const auto copies_of = [&](size_t bytes) {
    return static_cast<int>(std::clamp<size_t>(4 * static_cast<size_t>(l2_bytes) / bytes + 1, 1, 64));
  };

  // The memory reference: a device-to-device copy of the largest matrix.
  {
    size_t largest = 0;
    for (const Product& p : products) largest = std::max(largest, size_t(p.n) * size_t(p.k) * sizeof(bf16));
    HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory a, cuda::device_alloc(largest, "copy source"));
    HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory b, cuda::device_alloc(largest, "copy destination"));
    HIQ_ASSIGN_OR_RETURN(const double seconds,
                         median_seconds(
                             [&](int) {
                               return cuda::cuda_status(
                                   cudaMemcpyAsync(b.get(), a.get(), largest, cudaMemcpyDeviceToDevice, stream.get()),
                                   "cudaMemcpyAsync");
                             },
                             4, o.seconds_per_measurement, stream.get()));
    report.copy_bytes_per_s = 2.0 * static_cast<double>(largest) / seconds;
  }

  const int most_rows = *std::max_element(o.rows.begin(), o.rows.end());
  int most_k = 0;
  for (const Product& p : products) most_k = std::max(most_k, p.k);
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory x, random_device_bf16(size_t(most_rows) * most_k, 1, "x"));
  size_t done = 0;
  for (const Product& p : products) {
    const size_t matrix = size_t(p.n) * size_t(p.k);
    const int copies = copies_of(matrix * sizeof(bf16));
    HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory weights, random_device_bf16(matrix * copies, 2, "weights"));
    HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory y, cuda::device_alloc(size_t(most_rows) * p.n * 4 * 2, "y"));
    const auto* w = static_cast<const bf16*>(weights.get());
    const cudaDataType_t type = p.fp32 ? CUDA_R_32F : CUDA_R_16BF;
    const size_t y_half = size_t(most_rows) * p.n * 4;  // the second result goes after the first
    for (int m : o.rows) {
      GemmBenchReport::Row row;
      row.rows = m;
      row.product = p.name;
      row.n = p.n;
      row.k = p.k;
      for (const bool skinny : {false, true}) {
        gemms.set_skinny(skinny ? cuda::Gemms::Skinny::kWhereverPossible : cuda::Gemms::Skinny::kNever);
        void* out = static_cast<std::byte*>(y.get()) + (skinny ? y_half : 0);
        HIQ_ASSIGN_OR_RETURN(const double seconds, median_seconds(
                                                       [&](int i) {
                                                         return gemms.run(static_cast<const bf16*>(x.get()), m,
                                                                          w + matrix * (i % copies), p.n, p.k, out,
                                                                          type);
                                                       },
                                                       copies, o.seconds_per_measurement, stream.get()));
        (skinny ? row.skinny_seconds : row.cublas_seconds) = seconds;
      }
      // Both results of the last copy: they must agree.
      HIQ_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream.get()));
      HIQ_ASSIGN_OR_RETURN(const std::vector<float> a, download(y.get(), size_t(m) * p.n, p.fp32));
      HIQ_ASSIGN_OR_RETURN(const std::vector<float> b,
                           download(static_cast<std::byte*>(y.get()) + y_half, size_t(m) * p.n, p.fp32));
      for (size_t i = 0; i < a.size(); ++i)
        row.max_abs_difference = std::max(row.max_abs_difference, std::fabs(double{a[i]} - b[i]));
      report.products.push_back(row);
    }
    if (progress) progress(++done, products.size());
  }
  return report;
}

}  // namespace hiq
