// transfer/cuda/cuda_transfer_engine.cu — the TransferEngine on a CUDA GPU.
//
// Design. An operation is queued entirely at submission, on its kind's stream:
//
//   start event → slot lists H2D (from the index ring) → kernels → end event
//
// A load queues one kernel per layer and records that layer's event after it,
// alternating between two streams with half the multiprocessors each: one
// layer's launch and tail overlap its neighbour's transfer, and together they
// still occupy at most `gpu_sms` multiprocessors. A backup queues one kernel
// for all layers (nothing waits on a backup's layers). The kernels read or write the records in pinned, mapped L2 directly
// (zero-copy): only encoded bytes cross PCIe, and scattered L2 slots cost no
// extra copies. scripts/gpu-check and `hiq bench transfer` measure this design
// against the staged alternative (encode into device memory, then
// cudaMemcpyAsync); docs/benchmarks.md has the comparison.
//
// Completion is observed, never waited for behind the caller's back: reap()
// queries the end events of each stream's oldest operations, in order, and
// releases their index-ring regions; poll() then acknowledges completed
// operations in submission order. Operations of one stream complete in order,
// so FIFO release is safe.
//
// Threads: submissions are serialised by submit_mu_ (the fault hook runs under
// it, not under mu_, so it may block); mu_ guards the operation list, the rings
// and the counters, and is never held while waiting on the GPU.
#include <algorithm>
#include <array>
#include <chrono>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "codec/cuda/row_kernels.h"
#include "cuda/buffers.h"
#include "cuda/check.cuh"
#include "memory/cuda_device_kv_pool.h"
#include "transfer/cuda/index_ring.h"
#include "transfer/cuda/rung_shapes.h"
#include "transfer/cuda_transfer_engine.h"

namespace hiq {
namespace {

struct Operation {
  Ticket ticket = 0;
  TransferKind kind = TransferKind::kBackup;
  size_t tokens = 0;
  std::vector<RungGroup> groups;         // of the slot lists, by the rung of the L2 slot
  int layers = 0;
  int enqueued = 0;                      // loads: layers whose kernels are queued; backups: 0 or all
  std::vector<cuda::Event> layer_done;   // loads: one per layer (backups use `end` for every layer)
  cuda::Event start, end;                // timing events around the whole operation
  cuda::Event staged, side_done;         // loads on two streams: slot lists uploaded; second stream's work done
  Status status;                         // why the operation failed, if it did
  bool complete = false;                 // end event observed
};

class CudaEngine final : public CudaTransferEngine {
 public:
  // Per rung of the host pool: the kernels' block shapes.
  // `first_layer`: the L2 layer holding L1's layer 0 (a tensor-parallel
  // rank's share of a pool of every rank's records); `pinned` may be empty
  // when the caller pins L2 for several engines.
  CudaEngine(DeviceKvPool& l1, HostKvPool& l2, int first_layer, TransferEngineOptions options,
             PinnedHostMemory pinned, std::vector<cuda::KernelShape> encode, std::vector<cuda::KernelShape> decode)
      : l1_(l1),
        l2_(l2),
        first_layer_(first_layer),
        options_(std::move(options)),
        pinned_(std::move(pinned)),
        encode_(std::move(encode)),
        decode_(std::move(decode)) {}

  Status init() {
    const KvGeometry& g = l1_.geometry();
    parts_ = g.rows_per_layer();
    planes_.resize(static_cast<size_t>(l2_.rungs()));
    for (int rung = 0; rung < l2_.rungs(); ++rung)
      for (int p = 0; p < parts_; ++p) {
        const auto part = static_cast<KvPart>(p);
        cuda::PlaneView& v = planes_[static_cast<size_t>(rung)][p];
        v.rows = l1_.plane(0, part);
        v.rows_layer_stride = g.num_layers > 1 ? static_cast<size_t>(l1_.plane(1, part) - l1_.plane(0, part)) : 0;
        const int first = first_layer_;
        v.records = l2_.plane(first, part, rung);
        v.records_layer_stride =
            g.num_layers > 1 ? static_cast<size_t>(l2_.plane(first + 1, part, rung) - l2_.plane(first, part, rung))
                             : 0;
        v.records_slot_stride = l2_.record_stride(part);
        v.layout = l2_.layout(part, rung);
      }
    for (Lane& lane : lanes_) {
      HIQ_ASSIGN_OR_RETURN(lane.stream, cuda::make_stream());
    }
    HIQ_ASSIGN_OR_RETURN(lane_for(TransferKind::kLoad).side, cuda::make_stream());
    HIQ_ASSIGN_OR_RETURN(counters_, cuda::device_alloc(2 * sizeof(unsigned long long), "codec counters"));
    HIQ_ASSIGN_OR_RETURN(counters_host_, cuda::pinned_alloc(2 * sizeof(unsigned long long), "codec counters"));
    HIQ_CUDA_RETURN_IF_ERROR(cudaMemset(counters_.get(), 0, 2 * sizeof(unsigned long long)));
    std::fill_n(static_cast<unsigned long long*>(counters_host_.get()), 2, 0ull);
    return Status::ok();
  }

  ~CudaEngine() override {
    drain();  // no kernel may touch the pools, the rings or pinned L2 after we return
  }

  Result<Ticket> backup(std::span<const SlotId> l1_slots, std::span<const SlotId> l2_slots) override {
    return submit(TransferKind::kBackup, l1_slots, l1_.num_slots(), l2_slots, l2_.num_slots());
  }

  Result<Ticket> load(std::span<const SlotId> l2_slots, std::span<const SlotId> l1_slots) override {
    return submit(TransferKind::kLoad, l2_slots, l2_.num_slots(), l1_slots, l1_.num_slots());
  }

  Status wait_layer(Ticket ticket, int layer) override {
    std::shared_ptr<Operation> op;
    cudaEvent_t event = nullptr;
    {
      std::lock_guard lock(mu_);
      HIQ_ASSIGN_OR_RETURN(op, find(ticket));
      HIQ_RETURN_IF_ERROR(check_layer(*op, layer));
      event = layer_event(*op, layer);
      if (!event) return op->status;  // never queued: the operation failed at submission
    }
    HIQ_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(event));
    std::lock_guard lock(mu_);
    return op->status;
  }

  Status wait(Ticket ticket) override {
    std::shared_ptr<Operation> op;
    {
      std::lock_guard lock(mu_);
      HIQ_ASSIGN_OR_RETURN(op, find(ticket));
    }
    HIQ_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(op->end.get()));
    std::lock_guard lock(mu_);
    reap();
    return op->status;
  }

  Result<bool> layer_ready(Ticket ticket, int layer) override {
    std::lock_guard lock(mu_);
    HIQ_ASSIGN_OR_RETURN(std::shared_ptr<Operation> op, find(ticket));
    HIQ_RETURN_IF_ERROR(check_layer(*op, layer));
    cudaEvent_t event = layer_event(*op, layer);
    if (!event || !op->status.is_ok()) return false;
    const cudaError_t err = cudaEventQuery(event);
    if (err == cudaErrorNotReady) return false;
    HIQ_RETURN_IF_ERROR(cuda::cuda_status(err, "cudaEventQuery"));
    return true;
  }

  std::vector<Completion> poll() override {
    std::lock_guard lock(mu_);
    reap();
    std::vector<Completion> out;
    while (!ops_.empty() && ops_.front()->complete) {
      const Operation& op = *ops_.front();
      out.push_back({op.ticket, op.kind, op.tokens, op.status});
      ops_.pop_front();
    }
    return out;
  }

  void drain() override {
    std::lock_guard submit_lock(submit_mu_);  // nothing new is queued meanwhile
    for (Lane& lane : lanes_) {
      if (lane.stream) (void)cudaStreamSynchronize(lane.stream.get());
      if (lane.side) (void)cudaStreamSynchronize(lane.side.get());
    }
    std::lock_guard lock(mu_);
    reap();
  }

  TransferStats stats() const override {
    std::lock_guard lock(mu_);
    const_cast<CudaEngine*>(this)->reap();  // counts what has completed by now
    return stats_;
  }

  Status stream_wait_layer(Ticket ticket, int layer, void* stream) override {
    std::lock_guard lock(mu_);
    HIQ_ASSIGN_OR_RETURN(std::shared_ptr<Operation> op, find(ticket));
    HIQ_RETURN_IF_ERROR(check_layer(*op, layer));
    cudaEvent_t event = layer_event(*op, layer);
    if (!event || !op->status.is_ok())
      return op->status.is_ok() ? internal_error("layer was never queued") : op->status;
    return cuda::cuda_status(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), event, 0), "cudaStreamWaitEvent");
  }

  LaunchShape transfer_launch_shape() const override {
    int warps = 0;
    for (const auto* shapes : {&encode_, &decode_})
      for (const cuda::KernelShape& shape : *shapes) warps = std::max(warps, shape.warps_per_block);
    return {options_.gpu_sms, load_blocks(), two_load_streams() ? 2 : 1, warps * 32};
  }

  // Blocks of one load kernel; two run at once when the loads use two streams.
  int load_blocks() const { return two_load_streams() ? options_.gpu_sms / 2 : options_.gpu_sms; }
  bool two_load_streams() const { return options_.gpu_sms >= 2; }

 private:
  struct Lane {
    cuda::Stream stream;
    cuda::Stream side;  // loads: every other layer's kernel
    cuda::IndexRing ring;
    std::deque<std::shared_ptr<Operation>> pending;  // queued on this stream, not yet seen complete
  };

  Lane& lane_for(TransferKind kind) { return lanes_[kind == TransferKind::kBackup ? 0 : 1]; }

  Result<Ticket> submit(TransferKind kind, std::span<const SlotId> src, size_t src_slots, std::span<const SlotId> dst,
                        size_t dst_slots) {
    HIQ_RETURN_IF_ERROR(check_transfer_slots(kind, src, src_slots, dst, dst_slots));
    const std::string what(transfer_kind_name(kind));
    if (src.size() > UINT32_MAX / 2) return out_of_range(what + ": too many slots in one operation");
    const std::span<const SlotId> l1_in = kind == TransferKind::kBackup ? src : dst;
    const std::span<const SlotId> l2_in = kind == TransferKind::kBackup ? dst : src;
    std::vector<SlotId> l1(l1_in.begin(), l1_in.end()), l2(l2_in.begin(), l2_in.end());
    auto groups = group_by_rung(l2_, l2, l1);
    if (!groups) return groups.status().with_context(what);

    std::lock_guard submit_lock(submit_mu_);
    auto op = std::make_shared<Operation>();
    op->kind = kind;
    op->tokens = src.size();
    op->groups = std::move(*groups);
    op->layers = l1_.geometry().num_layers;
    HIQ_ASSIGN_OR_RETURN(op->start, cuda::make_event(/*timing=*/true));
    HIQ_ASSIGN_OR_RETURN(op->end, cuda::make_event(/*timing=*/true));
    cuda::IndexRing::Region region;
    {
      std::lock_guard lock(mu_);
      reap();
      if (ops_.size() >= options_.max_inflight) {
        ++stats_.refused_ops;
        return resource_exhausted(what + ": " + std::to_string(ops_.size()) +
                                  " transfers are in flight or unacknowledged, the most allowed");
      }
      HIQ_ASSIGN_OR_RETURN(region, lane_for(kind).ring.acquire(2 * src.size()));
      op->ticket = next_ticket_++;
    }
    // From here on the operation exists: whatever fails is recorded in its
    // status, and its end event is recorded after whatever was queued.
    const size_t n = src.size();
    std::copy(l1.begin(), l1.end(), region.host);
    std::copy(l2.begin(), l2.end(), region.host + n);
    cudaStream_t stream = lane_for(kind).stream.get();
    op->status = enqueue(*op, region, stream);
    if (op->side_done) {  // the end waits for the second stream's layers too
      Status joined = cuda::cuda_status(cudaEventRecord(op->side_done.get(), lane_for(kind).side.get()),
                                        "cudaEventRecord");
      if (joined.is_ok())
        joined = cuda::cuda_status(cudaStreamWaitEvent(stream, op->side_done.get(), 0), "cudaStreamWaitEvent");
      if (op->status.is_ok()) op->status = joined;
    }
    const Status ended = cuda::cuda_status(cudaEventRecord(op->end.get(), stream), "cudaEventRecord");
    if (!ended.is_ok()) {
      // No end event: wait for the stream here instead. An event never
      // recorded reports complete, so reap() then releases the operation.
      (void)cudaStreamSynchronize(stream);
      if (lane_for(kind).side) (void)cudaStreamSynchronize(lane_for(kind).side.get());
      if (op->status.is_ok()) op->status = ended;
    }
    std::lock_guard lock(mu_);
    lane_for(kind).pending.push_back(op);
    ops_.push_back(op);
    return op->ticket;
  }

  // Queues the operation's work; the first failure stops it.
  Status enqueue(Operation& op, const cuda::IndexRing::Region& region, cudaStream_t stream) {
    const size_t n = op.tokens;
    HIQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(op.start.get(), stream));
    HIQ_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(region.device, region.host, 2 * n * sizeof(uint32_t), cudaMemcpyHostToDevice, stream));
    // One batch per rung group: its planes, and its range of the slot lists.
    std::vector<cuda::RowBatch> batches(op.groups.size());
    for (size_t i = 0; i < op.groups.size(); ++i) {
      const RungGroup& g = op.groups[i];
      cuda::RowBatch& batch = batches[i];
      for (int p = 0; p < parts_; ++p) batch.parts[p] = planes_[static_cast<size_t>(g.rung)][p];
      batch.num_parts = parts_;
      batch.l1_rows = region.device + g.begin;
      batch.records = region.device + n + g.begin;
      batch.count = static_cast<uint32_t>(g.end - g.begin);
    }
    if (op.kind == TransferKind::kBackup) {
      for (int layer = 0; layer < op.layers; ++layer)
        if (options_.before_layer) HIQ_RETURN_IF_ERROR(options_.before_layer(op.ticket, op.kind, layer));
      for (size_t i = 0; i < batches.size(); ++i) {
        cuda::RowBatch& batch = batches[i];
        batch.first_layer = 0;
        batch.num_layers = op.layers;
        batch.counters = static_cast<unsigned long long*>(counters_.get());
        HIQ_RETURN_IF_ERROR(cuda::launch_rows(cuda::Direction::kEncode, batch,
                                              encode_[static_cast<size_t>(op.groups[i].rung)], options_.gpu_sms,
                                              stream));
      }
      HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(counters_host_.get(), counters_.get(), 2 * sizeof(unsigned long long),
                                               cudaMemcpyDeviceToHost, stream));
      op.enqueued = op.layers;
      return Status::ok();
    }
    op.layer_done.resize(static_cast<size_t>(op.layers));
    cudaStream_t side = stream;
    if (two_load_streams()) {
      side = lane_for(TransferKind::kLoad).side.get();
      HIQ_ASSIGN_OR_RETURN(op.staged, cuda::make_event(/*timing=*/false));
      HIQ_ASSIGN_OR_RETURN(op.side_done, cuda::make_event(/*timing=*/false));
      HIQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(op.staged.get(), stream));
      HIQ_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(side, op.staged.get(), 0));
    }
    for (int layer = 0; layer < op.layers; ++layer) {
      if (options_.before_layer) HIQ_RETURN_IF_ERROR(options_.before_layer(op.ticket, op.kind, layer));
      cuda::Event& done = op.layer_done[static_cast<size_t>(layer)];
      HIQ_ASSIGN_OR_RETURN(done, cuda::make_event(/*timing=*/false));
      cudaStream_t s = layer % 2 ? side : stream;
      for (size_t i = 0; i < batches.size(); ++i) {
        cuda::RowBatch& batch = batches[i];
        batch.first_layer = layer;
        batch.num_layers = 1;
        HIQ_RETURN_IF_ERROR(cuda::launch_rows(cuda::Direction::kDecode, batch,
                                              decode_[static_cast<size_t>(op.groups[i].rung)], load_blocks(), s));
      }
      HIQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(done.get(), s));
      op.enqueued = layer + 1;
    }
    return Status::ok();
  }

  // Marks operations whose end event has fired complete, stream by stream in
  // order, counts them and releases their ring regions. Caller holds mu_.
  void reap() {
    for (Lane& lane : lanes_) {
      while (!lane.pending.empty()) {
        Operation& op = *lane.pending.front();
        const cudaError_t err = cudaEventQuery(op.end.get());
        if (err == cudaErrorNotReady) break;
        if (err != cudaSuccess && op.status.is_ok()) op.status = cuda::cuda_status(err, "transfer on the GPU");
        complete(op);
        lane.ring.release_oldest();
        lane.pending.pop_front();
      }
    }
  }

  void complete(Operation& op) {
    op.complete = true;
    if (!op.status.is_ok()) {
      ++stats_.failed_ops;
      return;
    }
    float ms = 0;
    if (cudaEventElapsedTime(&ms, op.start.get(), op.end.get()) != cudaSuccess) {
      (void)cudaGetLastError();
      ms = 0;
    }
    const uint64_t tokens = op.tokens, bytes = group_bytes(l2_, op.groups);
    if (op.kind == TransferKind::kBackup) {
      ++stats_.backup_ops;
      stats_.backup_tokens += tokens;
      stats_.backup_bytes += bytes;
      stats_.backup_seconds += ms * 1e-3;
      stats_.codec.rows += tokens * static_cast<uint64_t>(op.layers) * static_cast<uint64_t>(parts_);
      // Cumulative device counters, copied after each backup on its stream.
      const auto* counters = static_cast<const unsigned long long*>(counters_host_.get());
      stats_.codec.nonfinite_heads = counters[0];
      stats_.codec.out_of_range_heads = counters[1];
    } else {
      ++stats_.load_ops;
      stats_.load_tokens += tokens;
      stats_.load_bytes += bytes;
      stats_.load_seconds += ms * 1e-3;
    }
  }

  Result<std::shared_ptr<Operation>> find(Ticket ticket) {
    for (auto& op : ops_)
      if (op->ticket == ticket) return op;
    return not_found("transfer ticket " + std::to_string(ticket) + " is unknown or already acknowledged");
  }

  static Status check_layer(const Operation& op, int layer) {
    if (layer < 0 || layer >= op.layers)
      return out_of_range("layer " + std::to_string(layer) + " of a " + std::to_string(op.layers) + "-layer model");
    return Status::ok();
  }

  // The event after which `layer` is done; null when it was never queued.
  static cudaEvent_t layer_event(const Operation& op, int layer) {
    if (layer >= op.enqueued) return nullptr;
    return op.kind == TransferKind::kLoad ? op.layer_done[static_cast<size_t>(layer)].get() : op.end.get();
  }

  DeviceKvPool& l1_;
  HostKvPool& l2_;
  const TransferEngineOptions options_;
  const int first_layer_;
  PinnedHostMemory pinned_;  // first in, last out: unpinned after every stream is drained
  const std::vector<cuda::KernelShape> encode_, decode_;  // block shapes of backups and loads, per rung
  int parts_ = 0;
  std::vector<std::array<cuda::PlaneView, 2>> planes_;  // per rung: K, V
  cuda::DeviceMemory counters_;       // [non-finite heads, out-of-range heads], added to by encode kernels
  cuda::PinnedMemory counters_host_;  // their copy after the latest backup

  std::mutex submit_mu_;
  mutable std::mutex mu_;
  Lane lanes_[2];  // backup, load
  std::deque<std::shared_ptr<Operation>> ops_;  // submitted, not yet acknowledged, in order
  Ticket next_ticket_ = 1;
  TransferStats stats_;
};

}  // namespace

namespace {

// The engine over `l1` and L2's layers [first_layer, first_layer + L1's
// layers), their geometries checked by the caller; pins L2 unless told not to.
Result<std::unique_ptr<CudaTransferEngine>> make_engine(DeviceKvPool& l1, HostKvPool& l2, int first_layer, bool pin,
                                                        TransferEngineOptions options) {
  if (options.max_inflight < 1) return invalid_argument("max_inflight must be at least 1");
  if (options.gpu_sms < 1) return invalid_argument("gpu_sms must be at least 1");
  HIQ_RETURN_IF_ERROR(cuda::require_gpu());
  cudaPointerAttributes attributes{};
  HIQ_CUDA_RETURN_IF_ERROR(cudaPointerGetAttributes(&attributes, l1.plane(0, KvPart::kK)));
  if (l1.host_accessible() || attributes.type != cudaMemoryTypeDevice)
    return invalid_argument("the CUDA transfer engine needs an L1 pool in GPU memory (make_cuda_device_kv_pool)");
  HIQ_ASSIGN_OR_RETURN(RungKernelShapes shapes, rung_kernel_shapes(l2, l1.geometry().rows_per_layer()));
  PinnedHostMemory pinned;
  if (pin) {
    HIQ_ASSIGN_OR_RETURN(pinned, PinnedHostMemory::pin(l2.plane(0, KvPart::kK), l2.reserved_bytes()));
  }
  auto engine = std::make_unique<CudaEngine>(l1, l2, first_layer, std::move(options), std::move(pinned),
                                             std::move(shapes.encode), std::move(shapes.decode));
  HIQ_RETURN_IF_ERROR(engine->init());
  return std::unique_ptr<CudaTransferEngine>(std::move(engine));
}

}  // namespace

Result<std::unique_ptr<CudaTransferEngine>> make_cuda_transfer_engine(DeviceKvPool& l1, HostKvPool& l2,
                                                                      TransferEngineOptions options) {
  HIQ_RETURN_IF_ERROR(check_pools_match(l1, l2));
  return make_engine(l1, l2, 0, /*pin=*/true, std::move(options));
}

Result<std::unique_ptr<CudaTransferEngine>> make_cuda_rank_transfer_engine(DeviceKvPool& l1, HostKvPool& l2,
                                                                           int rank, int size,
                                                                           TransferEngineOptions options) {
  const KvGeometry& g = l1.geometry();
  if (size < 1 || rank < 0 || rank >= size)
    return invalid_argument("tensor-parallel rank " + std::to_string(rank) + " of " + std::to_string(size));
  if (g.tp_size != size)
    return invalid_argument("rank " + std::to_string(rank) + "'s L1 pool is of a tp_size " + std::to_string(g.tp_size) +
                            " geometry, not " + std::to_string(size));
  const KvGeometry all = tp_host_geometry(g), &host = l2.geometry();
  if (host.num_layers != all.num_layers || host.row_shape(KvPart::kK) != all.row_shape(KvPart::kK) ||
      host.row_shape(KvPart::kV) != all.row_shape(KvPart::kV))
    return invalid_argument("the host pool does not hold every rank's records of this L1 pool's geometry");
  return make_engine(l1, l2, rank * g.num_layers, /*pin=*/false, std::move(options));
}

}  // namespace hiq
