#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "codec/cuda/row_kernels.h"
#include "codec/numeric.h"
#include "core/median_time.h"
#include "cuda/buffers.h"
#include "cuda/check.cuh"
#include "cuda/device.h"
#include "memory/cuda_device_kv_pool.h"
#include "memory/host_kv_pool.h"
#include "transfer/cuda_transfer_engine.h"
#include "transfer/transfer_bench.h"

namespace hiq {
namespace {


// Values like real K and V (|x| < 4, varied magnitudes), never zeros: timing
// zeros can flatter a kernel.
__global__ void fill_random_bf16(uint16_t* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    const float unit = static_cast<float>(static_cast<int32_t>(x >> 40) - (1 << 23)) / static_cast<float>(1 << 23);
    p[i] = numeric::float_to_bf16(unit * static_cast<float>(1 + (x & 3)));
  }
}

size_t encoded_bytes_per_token(const KvGeometry& g, CodecKind codec, size_t align) {
  size_t bytes = 0;
  for (int p = 0; p < g.rows_per_layer(); ++p)
    bytes += RecordLayout::compute(codec, g.row_shape(static_cast<KvPart>(p)), align).record_bytes;
  return bytes * static_cast<size_t>(g.num_layers);
}

// Everything one codec's measurements share.
struct Bench {
  const TransferBenchOptions& options;
  DeviceKvPool& l1;
  HostKvPool& l2;
  CudaTransferEngine& engine;
  std::byte* staging;       // device: records of the staged design and the kernels alone
  std::byte* copy_target;   // device: the D2D copy's destination
  const uint32_t* identity; // device: 0, 1, 2, …
  cudaStream_t copy_stream, kernel_stream;
  cuda::KernelShape encode_shape, decode_shape;
  std::vector<cudaEvent_t> layer_events;

  // Through the engine: submit, wait, acknowledge.
  Status transfer(TransferKind kind, std::span<const SlotId> l1_slots, std::span<const SlotId> l2_slots) {
    HIQ_ASSIGN_OR_RETURN(const Ticket t, kind == TransferKind::kLoad ? engine.load(l2_slots, l1_slots)
                                                                      : engine.backup(l1_slots, l2_slots));
    HIQ_RETURN_IF_ERROR(engine.wait(t));
    for (const Completion& c : engine.poll()) HIQ_RETURN_IF_ERROR(c.status);
    return Status::ok();
  }

  Status memcpy_sync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, kind, copy_stream));
    return cuda::cuda_status(cudaStreamSynchronize(copy_stream), "cudaStreamSynchronize");
  }

  // The rows of `n` tokens: L1 slots 0..n-1, records in `records` laid out
  // [layer][K: n records][V: n records] (or, for L2, the pool's planes).
  cuda::RowBatch batch(size_t n, std::byte* records, bool pool_records) {
    const KvGeometry& g = l1.geometry();
    cuda::RowBatch b;
    b.num_parts = g.rows_per_layer();
    size_t offset = 0, stride = 0;
    for (int p = 0; p < b.num_parts; ++p) stride += n * l2.layout(static_cast<KvPart>(p)).record_bytes;
    for (int p = 0; p < b.num_parts; ++p) {
      const auto part = static_cast<KvPart>(p);
      cuda::PlaneView& v = b.parts[p];
      v.rows = l1.plane(0, part);
      v.rows_layer_stride = g.num_layers > 1 ? static_cast<size_t>(l1.plane(1, part) - l1.plane(0, part)) : 0;
      v.layout = l2.layout(part);
      if (pool_records) {
        v.records = l2.plane(0, part);
        v.records_layer_stride = g.num_layers > 1 ? static_cast<size_t>(l2.plane(1, part) - l2.plane(0, part)) : 0;
        v.records_slot_stride = l2.record_stride(part);
      } else {
        v.records = records + offset;
        v.records_layer_stride = stride;
        offset += n * v.layout.record_bytes;
      }
    }
    b.l1_rows = b.records = identity;
    b.count = static_cast<uint32_t>(n);
    b.num_layers = g.num_layers;
    return b;
  }

  Status kernel_alone(cuda::Direction direction, size_t n) {
    const cuda::RowBatch b = batch(n, staging, false);
    const cuda::KernelShape& shape = direction == cuda::Direction::kEncode ? encode_shape : decode_shape;
    HIQ_RETURN_IF_ERROR(cuda::launch_rows(direction, b, shape, 1 << 16, kernel_stream));
    return cuda::cuda_status(cudaStreamSynchronize(kernel_stream), "cudaStreamSynchronize");
  }

  // The restore kernel alone, all layers in one launch (no per-layer events):
  // what the per-layer launches of the engine cost, by difference.
  Status restore_one_launch(size_t n) {
    const cuda::RowBatch b = batch(n, nullptr, true);
    HIQ_RETURN_IF_ERROR(cuda::launch_rows(cuda::Direction::kDecode, b, decode_shape, options.gpu_sms, kernel_stream));
    return cuda::cuda_status(cudaStreamSynchronize(kernel_stream), "cudaStreamSynchronize");
  }

  // Staged restore: per layer, DMA the records of slots 0..n-1 into device
  // staging, then decode from there; copies and kernels overlap by layer.
  Status staged_restore(size_t n) {
    const KvGeometry& g = l1.geometry();
    cuda::RowBatch b = batch(n, staging, false);
    const size_t layer_bytes = b.parts[0].records_layer_stride;
    for (int layer = 0; layer < g.num_layers; ++layer) {
      for (int p = 0; p < b.num_parts; ++p) {
        const auto part = static_cast<KvPart>(p);
        std::byte* dst = b.parts[p].records + static_cast<size_t>(layer) * layer_bytes;
        HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, l2.plane(layer, part), n * l2.layout(part).record_bytes,
                                                 cudaMemcpyHostToDevice, copy_stream));
      }
      HIQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(layer_events[static_cast<size_t>(layer)], copy_stream));
      HIQ_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(kernel_stream, layer_events[static_cast<size_t>(layer)], 0));
      b.first_layer = layer;
      b.num_layers = 1;
      HIQ_RETURN_IF_ERROR(cuda::launch_rows(cuda::Direction::kDecode, b, decode_shape, options.gpu_sms, kernel_stream));
    }
    return cuda::cuda_status(cudaStreamSynchronize(kernel_stream), "cudaStreamSynchronize");
  }

  // Staged backup: per layer, encode into device staging, then DMA to L2.
  Status staged_backup(size_t n) {
    const KvGeometry& g = l1.geometry();
    cuda::RowBatch b = batch(n, staging, false);
    const size_t layer_bytes = b.parts[0].records_layer_stride;
    for (int layer = 0; layer < g.num_layers; ++layer) {
      b.first_layer = layer;
      b.num_layers = 1;
      HIQ_RETURN_IF_ERROR(cuda::launch_rows(cuda::Direction::kEncode, b, encode_shape, options.gpu_sms, kernel_stream));
      HIQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(layer_events[static_cast<size_t>(layer)], kernel_stream));
      HIQ_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_stream, layer_events[static_cast<size_t>(layer)], 0));
      for (int p = 0; p < b.num_parts; ++p) {
        const auto part = static_cast<KvPart>(p);
        const std::byte* src = b.parts[p].records + static_cast<size_t>(layer) * layer_bytes;
        HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(l2.plane(layer, part), src, n * l2.layout(part).record_bytes,
                                                 cudaMemcpyDeviceToHost, copy_stream));
      }
    }
    return cuda::cuda_status(cudaStreamSynchronize(copy_stream), "cudaStreamSynchronize");
  }

  Result<TransferBenchRow> measure(size_t n, std::mt19937_64& rng) {
    const KvGeometry& g = l1.geometry();
    TransferBenchRow row;
    row.codec = l2.codec().k;  // the bench builds single-codec pools
    row.tokens = n;
    row.wire_bytes = n * l2.bytes_per_token();
    row.bf16_bytes = n * g.l1_bytes_per_token();
    const double budget = options.seconds_per_measurement;
    std::vector<SlotId> slots(n), scattered(l2.capacity_tokens());
    std::iota(slots.begin(), slots.end(), 0u);
    std::iota(scattered.begin(), scattered.end(), 0u);
    std::shuffle(scattered.begin(), scattered.end(), rng);
    scattered.resize(n);

    HIQ_ASSIGN_OR_RETURN(row.backup_s, median_seconds(budget, [&] { return transfer(TransferKind::kBackup, slots, slots); }));
    HIQ_ASSIGN_OR_RETURN(row.restore_s, median_seconds(budget, [&] { return transfer(TransferKind::kLoad, slots, slots); }));
    HIQ_ASSIGN_OR_RETURN(row.restore_scattered_s,
                         median_seconds(budget, [&] { return transfer(TransferKind::kLoad, slots, scattered); }));
    HIQ_ASSIGN_OR_RETURN(row.restore_one_launch_s, median_seconds(budget, [&] { return restore_one_launch(n); }));
    std::byte* l2_base = l2.plane(0, KvPart::kK);
    HIQ_ASSIGN_OR_RETURN(row.memcpy_h2d_s, median_seconds(budget, [&] {
      return memcpy_sync(staging, l2_base, row.wire_bytes, cudaMemcpyHostToDevice);
    }));
    HIQ_ASSIGN_OR_RETURN(row.memcpy_d2h_s, median_seconds(budget, [&] {
      return memcpy_sync(l2_base, staging, row.wire_bytes, cudaMemcpyDeviceToHost);
    }));
    if (options.staged) {
      HIQ_ASSIGN_OR_RETURN(row.staged_backup_s, median_seconds(budget, [&] { return staged_backup(n); }));
      HIQ_ASSIGN_OR_RETURN(row.staged_restore_s, median_seconds(budget, [&] { return staged_restore(n); }));
    }
    HIQ_ASSIGN_OR_RETURN(row.encode_kernel_s,
                         median_seconds(budget, [&] { return kernel_alone(cuda::Direction::kEncode, n); }));
    HIQ_ASSIGN_OR_RETURN(row.decode_kernel_s,
                         median_seconds(budget, [&] { return kernel_alone(cuda::Direction::kDecode, n); }));
    HIQ_ASSIGN_OR_RETURN(row.d2d_copy_s, median_seconds(budget, [&] {
      return memcpy_sync(copy_target, l1.plane(0, KvPart::kK), row.bf16_bytes, cudaMemcpyDeviceToDevice);
    }));
    return row;
  }
};

}  // namespace

Result<TransferBenchReport> run_transfer_bench(const TransferBenchOptions& options,
                                               const std::function<void(size_t, size_t)>& progress) {
  HIQ_RETURN_IF_ERROR(options.geometry.validate());
  if (options.codecs.empty() || options.batches.empty()) return invalid_argument("no codecs or no batch sizes");
  const size_t max_tokens = *std::max_element(options.batches.begin(), options.batches.end());
  if (max_tokens == 0) return invalid_argument("batch sizes must be positive");
  HIQ_ASSIGN_OR_RETURN(const std::vector<cuda::GpuInfo> gpus, cuda::query_gpus());
  const KvGeometry& g = options.geometry;

  TransferBenchReport report;
  report.gpu = gpus.front().name;
  report.multiprocessors = gpus.front().multiprocessors;

  HIQ_ASSIGN_OR_RETURN(std::unique_ptr<DeviceKvPool> l1, make_cuda_device_kv_pool(g, max_tokens));
  const size_t l1_elements = l1->bytes() / 2;
  fill_random_bf16<<<1024, 256>>>(l1->plane(0, KvPart::kK), l1_elements, 0x5EEDull);
  HIQ_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  size_t staging_bytes = 0;
  for (CodecKind c : options.codecs)
    staging_bytes = std::max(staging_bytes, max_tokens * encoded_bytes_per_token(g, c, options.record_align));
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory staging, cuda::device_alloc(staging_bytes, "bench staging"));
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory copy_target, cuda::device_alloc(l1->bytes(), "bench copy target"));
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory identity, cuda::device_alloc(max_tokens * sizeof(uint32_t), "bench slots"));
  {
    std::vector<uint32_t> ids(max_tokens);
    std::iota(ids.begin(), ids.end(), 0u);
    HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(identity.get(), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  }
  HIQ_ASSIGN_OR_RETURN(cuda::Stream copy_stream, cuda::make_stream());
  HIQ_ASSIGN_OR_RETURN(cuda::Stream kernel_stream, cuda::make_stream());
  std::vector<cuda::Event> events;
  std::vector<cudaEvent_t> event_handles;
  for (int layer = 0; layer < g.num_layers; ++layer) {
    HIQ_ASSIGN_OR_RETURN(cuda::Event e, cuda::make_event(false));
    event_handles.push_back(e.get());
    events.push_back(std::move(e));
  }
  HIQ_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());

  std::mt19937_64 rng(42);
  size_t done = 0;
  const size_t total = options.codecs.size() * options.batches.size();
  for (CodecKind codec : options.codecs) {
    HostKvPoolOptions ho;
    ho.codec = codec;
    ho.record_align = options.record_align;
    const size_t per_token = encoded_bytes_per_token(g, codec, options.record_align);
    ho.size_bytes = (max_tokens + static_cast<size_t>(g.page_size)) * per_token;
    HIQ_ASSIGN_OR_RETURN(std::unique_ptr<HostKvPool> l2, HostKvPool::create(g, ho, max_tokens));
    TransferEngineOptions eo;
    eo.gpu_sms = options.gpu_sms;
    HIQ_ASSIGN_OR_RETURN(std::unique_ptr<CudaTransferEngine> engine, make_cuda_transfer_engine(*l1, *l2, eo));
    const auto launch = engine->transfer_launch_shape();
    report.backup_blocks = launch.backup_blocks;
    report.load_blocks = launch.load_blocks;
    report.load_streams = launch.load_streams;
    report.threads_per_block = launch.threads_per_block;
    const RecordLayout layouts[2] = {l2->layout(KvPart::kK), l2->layout(KvPart::kV)};
    HIQ_ASSIGN_OR_RETURN(const cuda::KernelShape encode_shape,
                         cuda::kernel_shape(cuda::Direction::kEncode, layouts, g.rows_per_layer()));
    HIQ_ASSIGN_OR_RETURN(const cuda::KernelShape decode_shape,
                         cuda::kernel_shape(cuda::Direction::kDecode, layouts, g.rows_per_layer()));
    Bench bench{options,
                *l1,
                *l2,
                *engine,
                static_cast<std::byte*>(staging.get()),
                static_cast<std::byte*>(copy_target.get()),
                static_cast<const uint32_t*>(identity.get()),
                copy_stream.get(),
                kernel_stream.get(),
                encode_shape,
                decode_shape,
                event_handles};
    // Valid records in every slot the loads will read.
    std::vector<SlotId> all(max_tokens);
    std::iota(all.begin(), all.end(), 0u);
    std::vector<SlotId> l2_all(l2->capacity_tokens());
    std::iota(l2_all.begin(), l2_all.end(), 0u);
    for (size_t first = 0; first < l2_all.size(); first += max_tokens) {
      const size_t n = std::min(max_tokens, l2_all.size() - first);
      HIQ_RETURN_IF_ERROR(bench.transfer(TransferKind::kBackup, std::span(all).first(n),
                                         std::span(l2_all).subspan(first, n)));
    }
    for (size_t n : options.batches) {
      HIQ_ASSIGN_OR_RETURN(TransferBenchRow row, bench.measure(n, rng));
      report.rows.push_back(row);
      if (progress) progress(++done, total);
    }
  }
  return report;
}

}  // namespace hiq
