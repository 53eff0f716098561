// `hiq bench model --tp-size N` (model/model_bench.h): the tensor-parallel
// model's rows, the same rows on one GPU, and the collective alone.
#include <algorithm>
#include <cstring>
#include <functional>

#include "core/median_time.h"
#include "cuda/buffers.h"
#include "cuda/check.cuh"
#include "cuda/device.h"
#include "kv/geometry.h"
#include "kv/model_config.h"
#include "memory/cuda_device_kv_pool.h"
#include "memory/host_kv_pool.h"
#include "model/cuda/bench_util.h"
#include "model/cuda_model.h"
#include "model/cuda_tp_model.h"
#include "model/model_bench.h"
#include "transfer/cuda_transfer_engine.h"

namespace hiq {
namespace {

using cuda::random_prompt;
using cuda::slot_range;

// One forward call over the batch (the TP model's or the one-GPU model's).
using Forward = std::function<Result<ModelOutput>(std::span<const ModelSequence>)>;

constexpr int kDecodeHeadroom = 256;  // decode steps a measurement may take (median_seconds: ≤ 201)

size_t slots_needed(const ModelBenchOptions& o) {
  size_t slots = o.restore_codecs.empty() ? 1 : static_cast<size_t>(o.restore_prompt + o.restore_prefix);
  for (int n : o.prefill_tokens) slots = std::max(slots, static_cast<size_t>(n));
  for (int b : o.decode_batches)
    slots = std::max(slots, static_cast<size_t>(b) * static_cast<size_t>(o.decode_context + kDecodeHeadroom));
  return slots;
}

Result<double> time_prefill(const Forward& forward, int vocab, int tokens, double budget) {
  const std::vector<int32_t> prompt = random_prompt(static_cast<size_t>(tokens), vocab, 1);
  const std::vector<SlotId> slots = slot_range(prompt.size(), 0);
  const ModelSequence seq{prompt, slots, 0};
  return median_seconds(budget, [&] { return forward(std::span(&seq, 1)).status(); });
}

// A decode step of `batch` sequences at `context` tokens each, from the same
// prefilled contexts every time.
Result<double> time_decode(const Forward& forward, int vocab, int batch, int context, double budget) {
  const size_t stride = static_cast<size_t>(context + kDecodeHeadroom);
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<SlotId>> slots;
  for (int b = 0; b < batch; ++b) {
    tokens.push_back(random_prompt(static_cast<size_t>(context), vocab, 100 + static_cast<uint32_t>(b)));
    slots.push_back(slot_range(stride, static_cast<size_t>(b) * stride));
  }
  std::vector<ModelSequence> sequences;
  for (int b = 0; b < batch; b += 4) {  // a few contexts at a time
    sequences.clear();
    for (int i = b; i < std::min(batch, b + 4); ++i)
      sequences.push_back({tokens[i], std::span(slots[i]).first(tokens[i].size()), 0});
    HIQ_ASSIGN_OR_RETURN(const ModelOutput out, forward(sequences));
    for (int i = b; i < std::min(batch, b + 4); ++i) tokens[i].push_back(out.next_tokens[i - b]);
  }
  return median_seconds(std::min(budget, 1.0), [&]() -> Status {
    if (tokens[0].size() >= stride) return failed_precondition("bench model: decode ran out of slots");
    sequences.clear();
    for (int b = 0; b < batch; ++b)
      sequences.push_back({tokens[b], std::span(slots[b]).first(tokens[b].size()), tokens[b].size() - 1});
    HIQ_ASSIGN_OR_RETURN(const ModelOutput out, forward(sequences));
    for (int b = 0; b < batch; ++b) tokens[b].push_back(out.next_tokens[b]);
    return Status::ok();
  });
}

// Every row's time through `forward`, in the report's order.
Result<std::vector<double>> time_rows(const Forward& forward, const ModelShape& shape, const ModelBenchOptions& o,
                                      const std::function<void()>& tick) {
  std::vector<double> seconds;
  for (int n : o.prefill_tokens) {
    HIQ_ASSIGN_OR_RETURN(const double s, time_prefill(forward, shape.vocab_size, n, o.seconds_per_measurement));
    seconds.push_back(s);
    tick();
  }
  for (int b : o.decode_batches) {
    HIQ_ASSIGN_OR_RETURN(const double s,
                         time_decode(forward, shape.vocab_size, b, o.decode_context, o.seconds_per_measurement));
    seconds.push_back(s);
    tick();
  }
  return seconds;
}

// Bytes per second of a 256 MiB copy from device `from` to device `to`.
Result<double> copy_bandwidth(int from, int to, double budget) {
  cuda::DeviceScope device;
  constexpr size_t kBytes = size_t{256} << 20;
  HIQ_RETURN_IF_ERROR(device.set(from));
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory source, cuda::device_alloc(kBytes, "copy source"));
  HIQ_RETURN_IF_ERROR(device.set(to));
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory target, cuda::device_alloc(kBytes, "copy target"));
  HIQ_ASSIGN_OR_RETURN(const double seconds, median_seconds(budget, [&]() -> Status {
    HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpyPeer(target.get(), to, source.get(), from, kBytes));
    return cuda::cuda_status(cudaDeviceSynchronize(), "peer copy");
  }));
  return static_cast<double>(kBytes) / seconds;
}

// Seconds of a pinned host-to-device copy of `bytes` on the current GPU (median).
Result<double> pinned_copy_seconds(size_t bytes, double budget) {
  HIQ_ASSIGN_OR_RETURN(cuda::PinnedMemory host, cuda::pinned_alloc(bytes, "copy source"));
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory device, cuda::device_alloc(bytes, "copy target"));
  std::memset(host.get(), 0x5a, bytes);
  return median_seconds(budget, [&]() -> Status {
    HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(device.get(), host.get(), bytes, cudaMemcpyHostToDevice));
    return Status::ok();
  });
}

// The rows a pass of this row sums: a decode batch runs at its bucket's size.
size_t summed_rows(const TpBenchReport::Row& row, const CudaModelOptions& cuda) {
  if (!row.decode) return static_cast<size_t>(row.tokens);
  const int bucket = decode_batch_bucket(row.tokens, cuda.cuda_graph_max_batch);
  return static_cast<size_t>(bucket > 0 ? bucket : row.tokens);
}

// The restore rows: a prompt prefilled over the ranks, its first
// restore_prefix tokens backed up through each codec and loaded back into
// other slots of every rank's pool.
Result<std::vector<TpBenchReport::Restore>> time_restores(CudaTpModel& model, std::span<DeviceKvPool* const> pools,
                                                          const KvGeometry& rank_geometry, const ModelShape& shape,
                                                          const ModelBenchOptions& o, const std::function<void()>& tick) {
  const auto prompt_len = static_cast<size_t>(o.restore_prompt), prefix = static_cast<size_t>(o.restore_prefix);
  const std::vector<int32_t> prompt = random_prompt(prompt_len, shape.vocab_size, 7);
  const std::vector<SlotId> prompt_slots = slot_range(prompt_len, 0), load_slots = slot_range(prefix, prompt_len);
  const std::vector<SlotId> l2_slots = slot_range(prefix, 0);
  const ModelSequence seq{prompt, prompt_slots, 0};
  HIQ_RETURN_IF_ERROR(model.forward(pools, std::span(&seq, 1), LogitsWanted::kNone).status());
  std::vector<int> devices;
  for (int r = 0; r < model.size(); ++r) devices.push_back(model.device(r));
  std::vector<TpBenchReport::Restore> rows;
  for (CodecKind codec : o.restore_codecs) {
    HostKvPoolOptions l2_options;
    l2_options.codec = codec;
    l2_options.capacity_tokens = prefix + static_cast<size_t>(rank_geometry.page_size);  // whole pages
    HIQ_ASSIGN_OR_RETURN(std::unique_ptr<HostKvPool> l2,
                         HostKvPool::create(tp_host_geometry(rank_geometry), l2_options, pools[0]->num_slots()));
    HIQ_ASSIGN_OR_RETURN(std::unique_ptr<CudaTpTransferEngine> engine,
                         make_cuda_tp_transfer_engine(pools, devices, *l2));
    HIQ_ASSIGN_OR_RETURN(const Ticket backup, engine->backup(std::span(prompt_slots).first(prefix), l2_slots));
    HIQ_RETURN_IF_ERROR(engine->wait(backup));
    (void)engine->poll();  // acknowledge it: the engine holds a bounded number of operations
    TpBenchReport::Restore row;
    row.codec = codec;
    row.tokens = o.restore_prefix;
    row.bytes = prefix * l2->bytes_per_token();
    HIQ_ASSIGN_OR_RETURN(row.seconds, median_seconds(o.seconds_per_measurement, [&]() -> Status {
      HIQ_ASSIGN_OR_RETURN(const Ticket load, engine->load(l2_slots, load_slots));
      const Status status = engine->wait(load);
      (void)engine->poll();
      return status;
    }));
    HIQ_CUDA_RETURN_IF_ERROR(cudaSetDevice(devices[0]));
    HIQ_ASSIGN_OR_RETURN(row.copy_seconds,
                         pinned_copy_seconds(row.bytes / static_cast<size_t>(model.size()), o.seconds_per_measurement));
    rows.push_back(row);
    tick();
  }
  return rows;
}

}  // namespace

Result<TpBenchReport> run_tp_model_bench(const ModelConfig& config, const ModelShape& shape,
                                         const CpuModelWeights& weights, int tp_size, const CudaTpOptions& tp,
                                         const ModelBenchOptions& o,
                                         const std::function<void(size_t, size_t)>& progress) {
  HIQ_ASSIGN_OR_RETURN(const std::vector<cuda::GpuInfo> gpus, cuda::query_gpus());
  const cuda::DeviceScope restore;  // the caller's device, which the ranks' setup changes
  // Each row twice (split, one GPU), then the restore rows.
  const size_t total = 2 * (o.prefill_tokens.size() + o.decode_batches.size()) + o.restore_codecs.size();
  size_t done = 0;
  const auto tick = [&] {
    if (progress) progress(++done, total);
  };

  TpBenchReport report;
  report.tp_size = tp_size;
  report.collective = tp.collective;
  for (int n : o.prefill_tokens) report.rows.push_back({false, n, 0});
  for (int b : o.decode_batches) report.rows.push_back({true, b, o.decode_context});
  {
    HIQ_ASSIGN_OR_RETURN(std::unique_ptr<CudaTpModel> model, make_cuda_tp_model(shape, weights, tp_size, tp));
    report.weight_bytes = model->weight_bytes();
    for (int r = 0; r < tp_size; ++r) {
      report.devices.push_back(model->device(r));
      report.gpus.push_back(gpus.at(static_cast<size_t>(model->device(r))).name);
    }
    const int second = tp_size > 1 ? model->device(1) : model->device(0);
    HIQ_ASSIGN_OR_RETURN(report.peer_copy_bytes_per_s,
                         copy_bandwidth(model->device(0), second, o.seconds_per_measurement));

    // Each rank's pool on its GPU, and a buffer per rank for the collective alone.
    const size_t slots = slots_needed(o);
    std::vector<std::unique_ptr<DeviceKvPool>> owned;
    std::vector<DeviceKvPool*> pools;
    std::vector<cuda::DeviceMemory> sums;
    std::vector<void*> sum_pointers;
    size_t most_rows = 1;
    for (const TpBenchReport::Row& row : report.rows) most_rows = std::max(most_rows, summed_rows(row, o.cuda));
    GeometryOptions geometry;
    geometry.tp_size = tp_size;
    HIQ_ASSIGN_OR_RETURN(const KvGeometry rank_geometry,
                         mha_kv_geometry(config.source, config.num_layers, config.num_kv_heads, config.head_dim,
                                         geometry));
    for (int r = 0; r < tp_size; ++r) {
      HIQ_CUDA_RETURN_IF_ERROR(cudaSetDevice(model->device(r)));
      HIQ_ASSIGN_OR_RETURN(std::unique_ptr<DeviceKvPool> pool, make_cuda_device_kv_pool(rank_geometry, slots));
      pools.push_back(pool.get());
      owned.push_back(std::move(pool));
      const size_t bytes = most_rows * static_cast<size_t>(shape.hidden_size) * 2;
      HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory sum, cuda::device_alloc(bytes, "all-reduce"));
      HIQ_CUDA_RETURN_IF_ERROR(cudaMemset(sum.get(), 0, bytes));
      sum_pointers.push_back(sum.get());
      sums.push_back(std::move(sum));
    }
    const Forward forward = [&](std::span<const ModelSequence> batch) {
      return model->forward(pools, batch, LogitsWanted::kNone);
    };
    HIQ_ASSIGN_OR_RETURN(const std::vector<double> seconds, time_rows(forward, shape, o, tick));
    for (size_t i = 0; i < report.rows.size(); ++i) {
      TpBenchReport::Row& row = report.rows[i];
      row.seconds = seconds[i];
      const size_t elements = summed_rows(row, o.cuda) * static_cast<size_t>(shape.hidden_size);
      row.all_reduce_bytes = elements * 2;
      row.all_reduces = 2 * shape.num_layers;
      HIQ_ASSIGN_OR_RETURN(row.all_reduce_seconds, median_seconds(o.seconds_per_measurement, [&] {
        return model->all_reduce(sum_pointers, elements);
      }));
    }
    if (!o.restore_codecs.empty()) {
      HIQ_ASSIGN_OR_RETURN(report.restore, time_restores(*model, pools, rank_geometry, shape, o, tick));
    }
  }  // the split model and its pools go before the whole one comes

  // The whole model on the first rank's GPU, where it fits.
  HIQ_CUDA_RETURN_IF_ERROR(cudaSetDevice(tp.device(0)));
  auto one = make_cuda_model(shape, weights, o.cuda);
  Result<std::unique_ptr<DeviceKvPool>> l1 =
      one ? make_cuda_device_kv_pool(config.kv_geometry(), slots_needed(o))
          : Result<std::unique_ptr<DeviceKvPool>>(one.status());
  if (one && l1) {
    const Forward forward = [&](std::span<const ModelSequence> batch) {
      return (*one)->forward(**l1, batch, LogitsWanted::kNone);
    };
    HIQ_ASSIGN_OR_RETURN(const std::vector<double> seconds, time_rows(forward, shape, o, tick));
    for (size_t i = 0; i < report.rows.size(); ++i) report.rows[i].one_gpu_seconds = seconds[i];
  } else {
    const Status why = one ? l1.status() : one.status();
    if (why.code() != StatusCode::kResourceExhausted) return why;
    report.one_gpu_note = "the whole model does not fit one GPU: " + why.message();
  }
  return report;
}

}  // namespace hiq
