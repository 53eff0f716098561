// `hiq bench gemm` (model/gemm_bench.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "cuda/buffers.h"
#include "cuda/check.cuh"
#include "cuda/device.h"
#include "model/cuda/bench_util.h"
#include "model/cuda/gemm.h"
#include "model/gemm_bench.h"

namespace hiq {
namespace {

using bf16 = __nv_bfloat16;

// Times each of the heuristic's best-ranked algorithms for the product of m
// rows (the weights rotating over `copies`), then runs each once more on the
// first copy to compare its result with the first algorithm's.
Status time_algorithms(cuda::Gemms& gemms, const bf16* x, int m, const bf16* w, int n, int k, int copies,
                       cudaDataType_t type, const GemmBenchOptions& o, GemmBenchReport::Row& row) {
  HIQ_ASSIGN_OR_RETURN(const std::vector<cuda::Gemms::Algorithm> algorithms,
                       gemms.algorithms(m, n, k, type, o.algorithms));
  const size_t matrix = size_t(n) * size_t(k), outputs = size_t(m) * n;
  const size_t bytes = outputs * (type == CUDA_R_32F ? 4 : 2);
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory y, cuda::device_alloc(bytes, "algorithm result"));
  cudaStream_t stream = gemms.stream();
  std::vector<float> first;
  for (const cuda::Gemms::Algorithm& algorithm : algorithms) {
    GemmBenchReport::Row::Algorithm a;
    a.name = algorithm.name;
    a.workspace_bytes = algorithm.workspace_bytes;
    HIQ_ASSIGN_OR_RETURN(a.seconds, cuda::median_event_seconds(
                                        [&](int i) {
                                          return gemms.run_algorithm(algorithm, x, m, w + matrix * (i % copies), n,
                                                                     k, y.get(), type);
                                        },
                                        copies, o.seconds_per_measurement, stream));
    HIQ_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(y.get(), 0xff, bytes, stream));  // NaN: a result not written shows
    HIQ_RETURN_IF_ERROR(gemms.run_algorithm(algorithm, x, m, w, n, k, y.get(), type));
    HIQ_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    HIQ_ASSIGN_OR_RETURN(std::vector<float> result, cuda::download_floats(y.get(), outputs, type == CUDA_R_32F));
    a.same_bits = true;
    if (first.empty()) {
      first = std::move(result);
    } else {
      for (size_t i = 0; i < outputs; ++i) {
        // Bits, not values: 0 and −0, or two NaNs, are not the same result.
        a.same_bits = a.same_bits && std::memcmp(&first[i], &result[i], sizeof(float)) == 0;
        a.max_abs_difference = std::max(a.max_abs_difference, std::fabs(double{first[i]} - result[i]));
      }
    }
    row.algorithms.push_back(std::move(a));
  }
  return Status::ok();
}

}  // namespace

Result<GemmBenchReport> run_gemm_bench(const GemmBenchOptions& o, const std::function<void(size_t, size_t)>& progress) {
  if (o.rows.empty()) return invalid_argument("bench gemm: no row counts");
  for (int m : o.rows)
    if (m < 1 || m > 4096) return invalid_argument("bench gemm: row counts must be in 1 … 4096");
  if (o.algorithms < 0 || o.algorithms > 64) return invalid_argument("bench gemm: algorithms must be in 0 … 64");
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
                         cuda::median_event_seconds(
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
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory x, cuda::random_device_bf16(size_t(most_rows) * most_k, 1, 0.05f, "x"));
  const auto* x_bf16 = static_cast<const bf16*>(x.get());
  size_t done = 0;
  for (const Product& p : products) {
    const size_t matrix = size_t(p.n) * size_t(p.k);
    const int copies = copies_of(matrix * sizeof(bf16));
    HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory weights, cuda::random_device_bf16(matrix * copies, 2, 0.05f, "weights"));
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
        HIQ_ASSIGN_OR_RETURN(const double seconds, cuda::median_event_seconds(
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
      HIQ_ASSIGN_OR_RETURN(const std::vector<float> a, cuda::download_floats(y.get(), size_t(m) * p.n, p.fp32));
      HIQ_ASSIGN_OR_RETURN(const std::vector<float> b,
                           cuda::download_floats(static_cast<std::byte*>(y.get()) + y_half, size_t(m) * p.n, p.fp32));
      for (size_t i = 0; i < a.size(); ++i)
        row.max_abs_difference = std::max(row.max_abs_difference, std::fabs(double{a[i]} - b[i]));
      if (o.algorithms > 0) HIQ_RETURN_IF_ERROR(time_algorithms(gemms, x_bf16, m, w, p.n, p.k, copies, type, o, row));
      report.products.push_back(row);
    }
    if (progress) progress(++done, products.size());
  }
  return report;
}

}  // namespace hiq
