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
#include "model/cuda/gemm_sm90.h"
#include "model/cuda/model_kernels.h"
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

Result<PrefillGemmBenchReport> run_prefill_gemm_bench(const GemmBenchOptions& o,
                                                      const std::function<void(size_t, size_t)>& progress) {
  if (o.prefill_rows.empty()) return invalid_argument("bench gemm: no prefill row counts");
  for (int m : o.prefill_rows)
    if (m < 1 || m > 65536) return invalid_argument("bench gemm: prefill row counts must be in 1 … 65536");
  if (o.hidden <= 0 || o.q_out <= 0 || o.kv_out <= 0 || o.intermediate <= 0)
    return invalid_argument("bench gemm: the model's sizes must be positive");
  HIQ_ASSIGN_OR_RETURN(const std::vector<cuda::GpuInfo> gpus, cuda::query_gpus());
  PrefillGemmBenchReport report;
  report.gpu = gpus.front().name;
  HIQ_ASSIGN_OR_RETURN(cuda::Stream stream, cuda::make_stream());
  constexpr size_t kWorkspace = size_t{32} << 20;
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory workspace, cuda::device_alloc(kWorkspace, "cuBLAS workspace"));
  HIQ_ASSIGN_OR_RETURN(cuda::Gemms gemms, cuda::Gemms::create(stream.get(), workspace.get(), kWorkspace));
  const cudaStream_t s = stream.get();

  const int hidden = o.hidden, q_out = o.q_out, qkv_out = o.q_out + 2 * o.kv_out, inter = o.intermediate;
  const auto most_rows = static_cast<size_t>(*std::max_element(o.prefill_rows.begin(), o.prefill_rows.end()));
  const size_t widest_k = static_cast<size_t>(std::max({hidden, q_out, inter}));
  const size_t widest_n = static_cast<size_t>(std::max({qkv_out, 2 * inter, hidden}));
  // Activations of unit scale and weights of a trained model's (about 0.02).
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory x, cuda::random_device_bf16(most_rows * widest_k, 1, 1.f, "x"));
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory w_qkv, cuda::random_device_bf16(size_t(qkv_out) * hidden, 2, 0.02f, "qkv"));
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory w_o, cuda::random_device_bf16(size_t(hidden) * q_out, 3, 0.02f, "o_proj"));
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory w_gate_up,
                       cuda::random_device_bf16(size_t(2 * inter) * hidden, 4, 0.02f, "gate_up"));
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory w_down, cuda::random_device_bf16(size_t(hidden) * inter, 5, 0.02f, "down"));
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory norm, cuda::random_device_bf16(size_t(hidden), 6, 1.f, "norm weight"));
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory residual, cuda::random_device_bf16(most_rows * hidden, 7, 1.f, "residual"));
  const size_t out_bytes = most_rows * widest_n * sizeof(bf16), stream_bytes = most_rows * hidden * sizeof(bf16);
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory y_cublas, cuda::device_alloc(out_bytes, "cuBLAS output"));
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory y_sm90, cuda::device_alloc(out_bytes, "Hopper kernel output"));
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory act_cublas, cuda::device_alloc(most_rows * inter * sizeof(bf16), "gate"));
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory res_cublas, cuda::device_alloc(stream_bytes, "residual stream"));
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory res_sm90, cuda::device_alloc(stream_bytes, "residual stream"));
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory normed, cuda::device_alloc(stream_bytes, "normalised"));
  const auto as = [](const cuda::DeviceMemory& m) { return static_cast<bf16*>(m.get()); };
  constexpr float kEps = 1e-6f;

  struct Step {
    const char* name;
    const cuda::DeviceMemory& w;
    int n, k;  // the product's: gate_up's n is both halves
    cuda::Sm90Epilogue epilogue;
  };
  const std::vector<Step> steps = {{"qkv", w_qkv, qkv_out, hidden, cuda::Sm90Epilogue::kStore},
                                   {"o_proj + add + norm", w_o, hidden, q_out, cuda::Sm90Epilogue::kAddToY},
                                   {"gate_up + silu", w_gate_up, 2 * inter, hidden, cuda::Sm90Epilogue::kSiluGate},
                                   {"down + add + norm", w_down, hidden, inter, cuda::Sm90Epilogue::kAddToY}};
  for (const Step& step : steps) {
    const int n_out = step.epilogue == cuda::Sm90Epilogue::kSiluGate ? step.n / 2 : step.n;
    if (!cuda::gemm_sm90_supports(x.get(), 1, step.w.get(), step.n, step.k, y_sm90.get(), cuda::Sm90Epilogue::kStore) ||
        !cuda::gemm_sm90_supports(x.get(), 1, step.w.get(), n_out, step.k, y_sm90.get(), step.epilogue))
      return unavailable(std::string("bench gemm --prefill: the Hopper kernel does not take ") + step.name + " (" +
                         std::to_string(step.n) + " × " + std::to_string(step.k) +
                         ") here: it needs a compute capability 9.0 GPU and n, k multiples of 256, 64");
  }

  // The results compared: the first rows of each way's (at most this many, to keep the copies small).
  constexpr size_t kComparedRows = 1024;
  const auto max_difference = [&](const void* a, const void* b, size_t rows, size_t width) -> Result<double> {
    HIQ_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    const size_t n = std::min(rows, kComparedRows) * width;
    HIQ_ASSIGN_OR_RETURN(const std::vector<float> va, cuda::download_floats(a, n, false));
    HIQ_ASSIGN_OR_RETURN(const std::vector<float> vb, cuda::download_floats(b, n, false));
    double most = 0;
    for (size_t i = 0; i < n; ++i) most = std::max(most, std::fabs(double{va[i]} - vb[i]));
    return most;
  };
  const auto timed = [&](const std::function<Status()>& call) {
    return cuda::median_event_seconds([&](int) { return call(); }, 1, o.seconds_per_measurement, s);
  };

  size_t done = 0;
  for (int m : o.prefill_rows) {
    for (const Step& step : steps) {
      PrefillGemmBenchReport::Row row;
      row.rows = m;
      row.step = step.name;
      row.n = step.n;
      row.k = step.k;
      const auto* w = static_cast<const bf16*>(step.w.get());
      const bf16* in = as(x);
      HIQ_ASSIGN_OR_RETURN(row.cublas_seconds,
                           timed([&] { return gemms.run(in, m, w, step.n, step.k, y_cublas.get(), CUDA_R_16BF); }));
      HIQ_ASSIGN_OR_RETURN(row.sm90_seconds, timed([&] {
                             return cuda::launch_gemm_sm90(in, m, w, step.n, step.k, as(y_sm90),
                                                           cuda::Sm90Epilogue::kStore, s);
                           }));
      switch (step.epilogue) {
        case cuda::Sm90Epilogue::kStore: {
          HIQ_ASSIGN_OR_RETURN(row.max_abs_difference,
                               max_difference(y_cublas.get(), y_sm90.get(), size_t(m), size_t(step.n)));
          break;
        }
        case cuda::Sm90Epilogue::kAddToY: {
          const auto cublas_step = [&] {
            HIQ_RETURN_IF_ERROR(gemms.run(in, m, w, step.n, step.k, y_cublas.get(), CUDA_R_16BF));
            return cuda::launch_add_rms_norm(as(res_cublas), as(y_cublas), as(norm), m, step.n, kEps, as(normed), s);
          };
          const auto sm90_step = [&] {
            HIQ_RETURN_IF_ERROR(
                cuda::launch_gemm_sm90(in, m, w, step.n, step.k, as(res_sm90), cuda::Sm90Epilogue::kAddToY, s));
            return cuda::launch_add_rms_norm(as(res_sm90), nullptr, as(norm), m, step.n, kEps, as(normed), s);
          };
          HIQ_ASSIGN_OR_RETURN(row.cublas_step_seconds, timed(cublas_step));
          HIQ_ASSIGN_OR_RETURN(row.sm90_step_seconds, timed(sm90_step));
          // Once more each from the same residual stream, to compare.
          for (const cuda::DeviceMemory* r : {&res_cublas, &res_sm90})
            HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(r->get(), residual.get(), stream_bytes, cudaMemcpyDeviceToDevice, s));
          HIQ_RETURN_IF_ERROR(cublas_step());
          HIQ_RETURN_IF_ERROR(sm90_step());
          HIQ_ASSIGN_OR_RETURN(row.max_abs_difference,
                               max_difference(res_cublas.get(), res_sm90.get(), size_t(m), size_t(step.n)));
          break;
        }
        case cuda::Sm90Epilogue::kSiluGate: {
          const int half = step.n / 2;
          const auto cublas_step = [&] {
            HIQ_RETURN_IF_ERROR(gemms.run(in, m, w, step.n, step.k, y_cublas.get(), CUDA_R_16BF));
            return cuda::launch_silu_mul(as(y_cublas), m, half, as(act_cublas), s);
          };
          HIQ_ASSIGN_OR_RETURN(row.cublas_step_seconds, timed(cublas_step));
          HIQ_ASSIGN_OR_RETURN(row.sm90_step_seconds, timed([&] {
                                 return cuda::launch_gemm_sm90(in, m, w, half, step.k, as(y_sm90),
                                                               cuda::Sm90Epilogue::kSiluGate, s);
                               }));
          HIQ_ASSIGN_OR_RETURN(row.max_abs_difference,
                               max_difference(act_cublas.get(), y_sm90.get(), size_t(m), size_t(half)));
          break;
        }
      }
      report.rows.push_back(std::move(row));
    }
    if (progress) progress(++done, o.prefill_rows.size());
  }
  return report;
}

}  // namespace hiq
