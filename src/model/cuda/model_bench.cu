#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>

#include <cuda_profiler_api.h>

#include "core/median_time.h"
#include "cuda/buffers.h"
#include "cuda/check.cuh"
#include "cuda/device.h"
#include "memory/cuda_device_kv_pool.h"
#include "model/cuda/bench_util.h"
#include "memory/host_kv_pool.h"
#include "model/cuda_model.h"
#include "model/model_bench.h"
#include "transfer/cuda_transfer_engine.h"

namespace hiq {
namespace {

using cuda::random_prompt;
using cuda::slot_range;

// Bytes read plus bytes written per second by a large device-to-device copy.
Result<double> device_copy_bandwidth(double budget) {
  constexpr size_t kBytes = size_t{1} << 30;
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory from, cuda::device_alloc(kBytes, "copy source"));
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory to, cuda::device_alloc(kBytes, "copy target"));
  HIQ_CUDA_RETURN_IF_ERROR(cudaMemset(from.get(), 0x5a, kBytes));
  HIQ_ASSIGN_OR_RETURN(const double seconds, median_seconds(budget, [&]() -> Status {
    HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(to.get(), from.get(), kBytes, cudaMemcpyDeviceToDevice));
    return cuda::cuda_status(cudaDeviceSynchronize(), "device copy");
  }));
  return 2.0 * static_cast<double>(kBytes) / seconds;
}

// Each component's median over a few profiled passes of `run`.
constexpr size_t kProfiledPasses = 5;
Result<ForwardProfile> median_profile(const std::function<Status(ForwardProfile*)>& run) {
  constexpr size_t kPasses = kProfiledPasses;
  std::vector<ForwardProfile> passes(kPasses);
  for (ForwardProfile& p : passes) HIQ_RETURN_IF_ERROR(run(&p));
  ForwardProfile median;
  using Field = double ForwardProfile::*;
  const Field fields[] = {&ForwardProfile::gemm_seconds, &ForwardProfile::attention_seconds,
                          &ForwardProfile::norm_elementwise_seconds, &ForwardProfile::lm_head_seconds,
                          &ForwardProfile::other_seconds};
  for (Field field : fields) {
    std::vector<double> v;
    for (const ForwardProfile& p : passes) v.push_back(p.*field);
    std::nth_element(v.begin(), v.begin() + kPasses / 2, v.end());
    median.*field = v[kPasses / 2];
  }
  return median;
}

}  // namespace

Result<ModelBenchReport> run_model_bench(const ModelConfig& config, const ModelShape& shape,
                                         const CpuModelWeights& weights, const ModelBenchOptions& o,
                                         const std::function<void(size_t, size_t)>& progress) {
  if (o.restore_prefix <= 0 || o.restore_prefix >= o.restore_prompt)
    return invalid_argument("bench model: the restored prefix must be shorter than the prompt");
  HIQ_ASSIGN_OR_RETURN(const std::vector<cuda::GpuInfo> gpus, cuda::query_gpus());
  ModelBenchReport report;
  report.gpu = gpus.front().name;
  HIQ_ASSIGN_OR_RETURN(std::unique_ptr<CudaModel> model, make_cuda_model(shape, weights, o.cuda));
  report.cuda_graphs = o.cuda.cuda_graphs;
  report.weight_bytes = model->weight_bytes();
  report.weight_bytes_per_step =
      report.weight_bytes - static_cast<size_t>(shape.vocab_size) * static_cast<size_t>(shape.hidden_size) * 2;
  const double budget = o.seconds_per_measurement;
  HIQ_ASSIGN_OR_RETURN(report.device_copy_bytes_per_s, device_copy_bandwidth(budget));

  // One L1 pool for everything: the longest prompt, the largest decode batch
  // with room to grow, or a restore row (two copies of its prefix).
  constexpr int kDecodeHeadroom = 256;  // decode steps a measurement may take
  const KvGeometry geometry = config.kv_geometry();
  size_t slots = static_cast<size_t>(o.restore_prompt + o.restore_prefix);
  for (int n : o.prefill_tokens) slots = std::max(slots, static_cast<size_t>(n));
  for (int b : o.decode_batches)
    slots = std::max(slots, static_cast<size_t>(b) * static_cast<size_t>(o.decode_context + kDecodeHeadroom));
  HIQ_ASSIGN_OR_RETURN(std::unique_ptr<DeviceKvPool> l1, make_cuda_device_kv_pool(geometry, slots));

  const size_t total = o.prefill_tokens.size() + o.decode_batches.size() + o.restore_codecs.size();
  size_t done = 0;
  const auto tick = [&] {
    if (progress) progress(++done, total);
  };

  for (int n : o.prefill_tokens) {
    const std::vector<int32_t> prompt = random_prompt(static_cast<size_t>(n), shape.vocab_size, 1);
    const std::vector<SlotId> prompt_slots = slot_range(prompt.size(), 0);
    const ModelSequence seq{prompt, prompt_slots, 0};
    const auto pass = [&](ForwardProfile* profile) {
      return model->forward(*l1, std::span(&seq, 1), LogitsWanted::kNone, nullptr, profile).status();
    };
    ModelBenchReport::Prefill row;
    row.tokens = n;
    HIQ_ASSIGN_OR_RETURN(row.seconds, median_seconds(budget, [&] { return pass(nullptr); }));
    HIQ_ASSIGN_OR_RETURN(row.components.seconds, median_profile(pass));
    row.components.gemm_flops = layer_gemm_flops(shape, n);
    row.components.attention_flops = attention_flops(shape, n, n);
    report.prefill.push_back(row);
    tick();
  }

  for (int batch : o.decode_batches) {
    const size_t stride = static_cast<size_t>(o.decode_context + kDecodeHeadroom);
    std::vector<std::vector<int32_t>> tokens;
    std::vector<std::vector<SlotId>> seq_slots;
    std::vector<ModelSequence> sequences;
    for (int b = 0; b < batch; ++b) {
      tokens.push_back(random_prompt(static_cast<size_t>(o.decode_context), shape.vocab_size, 100 + b));
      seq_slots.push_back(slot_range(stride, static_cast<size_t>(b) * stride));
    }
    // Prefill the contexts (a few sequences at a time), then time steps.
    for (int b = 0; b < batch; b += 4) {
      sequences.clear();
      for (int i = b; i < std::min(batch, b + 4); ++i)
        sequences.push_back({tokens[i], std::span(seq_slots[i]).first(tokens[i].size()), 0});
      HIQ_ASSIGN_OR_RETURN(const ModelOutput out, model->forward(*l1, sequences, LogitsWanted::kNone));
      for (int i = b; i < std::min(batch, b + 4); ++i) tokens[i].push_back(out.next_tokens[i - b]);
    }
    const auto step = [&](ForwardProfile* profile) -> Status {
      if (tokens[0].size() >= stride) return failed_precondition("bench model: decode ran out of slots");
      sequences.clear();
      for (int b = 0; b < batch; ++b)
        sequences.push_back({tokens[b], std::span(seq_slots[b]).first(tokens[b].size()), tokens[b].size() - 1});
      HIQ_ASSIGN_OR_RETURN(const ModelOutput out,
                           model->forward(*l1, sequences, LogitsWanted::kNone, nullptr, profile));
      for (int b = 0; b < batch; ++b) tokens[b].push_back(out.next_tokens[b]);
      return Status::ok();
    };
    // Each measurement starts from the prefilled context (the steps rewrite
    // the same slots with the same KV).
    const size_t prefilled = tokens[0].size();
    const auto timed_steps = [&](bool graphs) -> Result<double> {
      for (auto& t : tokens) t.resize(prefilled);
      model->set_cuda_graphs(graphs);
      return median_seconds(std::min(budget, 1.0), [&] { return step(nullptr); });
    };
    ModelBenchReport::Decode row;
    row.batch = batch;
    row.context = o.decode_context;
    HIQ_ASSIGN_OR_RETURN(row.eager_step_seconds, timed_steps(false));
    row.step_seconds = row.eager_step_seconds;
    if (o.cuda.cuda_graphs) {
      HIQ_ASSIGN_OR_RETURN(row.graph_step_seconds, timed_steps(true));
      row.step_seconds = row.graph_step_seconds;
    }
    if (o.profiler_range) {  // the timed steps left this bucket's graph captured (graphs on)
      for (auto& t : tokens) t.resize(prefilled);
      HIQ_CUDA_RETURN_IF_ERROR(cudaProfilerStart());
      const Status profiled = step(nullptr);
      HIQ_CUDA_RETURN_IF_ERROR(cudaProfilerStop());
      HIQ_RETURN_IF_ERROR(profiled);
    }
    for (auto& t : tokens) t.resize(prefilled);
    HIQ_ASSIGN_OR_RETURN(row.components.seconds, median_profile(step));
    row.components.gemm_flops = layer_gemm_flops(shape, batch);
    // At the context of the middle one of the profiled steps (the last ones).
    const auto middle_context = static_cast<int64_t>(tokens[0].size() - (kProfiledPasses + 1) / 2);
    row.components.attention_flops = batch * attention_flops(shape, 1, middle_context);
    row.kv_bytes = static_cast<size_t>(batch) * static_cast<size_t>(o.decode_context) * geometry.l1_bytes_per_token();
    row.floor_seconds = static_cast<double>(report.weight_bytes_per_step + row.kv_bytes) / report.device_copy_bytes_per_s;
    report.decode.push_back(row);
    tick();
  }

  const auto prompt_len = static_cast<size_t>(o.restore_prompt), prefix = static_cast<size_t>(o.restore_prefix);
  const std::vector<int32_t> prompt = random_prompt(prompt_len, shape.vocab_size, 7);
  const std::vector<SlotId> computed_slots = slot_range(prompt_len, 0);
  std::vector<SlotId> restored_slots = slot_range(prefix, prompt_len);
  restored_slots.insert(restored_slots.end(), computed_slots.begin() + static_cast<std::ptrdiff_t>(prefix),
                        computed_slots.end());
  const std::vector<SlotId> l2_slots = slot_range(prefix, 0);
  for (CodecKind codec : o.restore_codecs) {
    HostKvPoolOptions l2_options;
    l2_options.codec = codec;
    l2_options.ratio = static_cast<double>(prefix + 64) / static_cast<double>(slots);
    HIQ_ASSIGN_OR_RETURN(std::unique_ptr<HostKvPool> l2, HostKvPool::create(geometry, l2_options, slots));
    HIQ_ASSIGN_OR_RETURN(std::unique_ptr<CudaTransferEngine> engine, make_cuda_transfer_engine(*l1, *l2));

    ModelBenchReport::Restore row;
    row.codec = codec;
    row.prompt = o.restore_prompt;
    row.prefix = o.restore_prefix;
    const ModelSequence whole{prompt, computed_slots, 0};
    std::vector<float> recomputed;
    HIQ_ASSIGN_OR_RETURN(row.recompute_seconds, median_seconds(budget, [&]() -> Status {
      HIQ_ASSIGN_OR_RETURN(ModelOutput out, model->forward(*l1, std::span(&whole, 1), LogitsWanted::kLast));
      recomputed = std::move(out.logits);
      return Status::ok();
    }));
    HIQ_ASSIGN_OR_RETURN(const Ticket backup, engine->backup(std::span(computed_slots).first(prefix), l2_slots));
    HIQ_RETURN_IF_ERROR(engine->wait(backup));
    (void)engine->poll();  // acknowledge it: the engine holds a bounded number of operations

    const ModelSequence rest{prompt, restored_slots, prefix};
    std::vector<float> restored;
    HIQ_ASSIGN_OR_RETURN(row.restored_seconds, median_seconds(budget, [&]() -> Status {
      HIQ_ASSIGN_OR_RETURN(const Ticket load, engine->load(l2_slots, std::span(restored_slots).first(prefix)));
      auto out = model->forward(*l1, std::span(&rest, 1), LogitsWanted::kLast, [&](int layer, void* stream) {
        return engine->stream_wait_layer(load, layer, stream);
      });
      HIQ_RETURN_IF_ERROR(engine->wait(load));
      (void)engine->poll();
      HIQ_RETURN_IF_ERROR(out.status());
      restored = std::move(out->logits);
      return Status::ok();
    }));
    row.logits_relative_error = cuda::relative_error(restored, recomputed);
    row.same_next_token = std::max_element(restored.begin(), restored.end()) - restored.begin() ==
                          std::max_element(recomputed.begin(), recomputed.end()) - recomputed.begin();
    report.restore.push_back(row);
    tick();
  }
  report.graphs = model->graph_stats();
  return report;
}

}  // namespace hiq
