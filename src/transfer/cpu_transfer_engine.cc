// transfer/cpu_transfer_engine.cc — the TransferEngine on CPU worker threads.
//
// Each operation becomes one task per layer, queued in order (operation by
// operation, layer 0 first), so the first layers of a load are ready first.
// Under tensor parallelism a layer's task moves that layer of every rank (rank
// r's records are the host pool's layer r·L + l: memory/host_kv_pool.h), so a
// layer is ready only once every rank's part of it is, and a rank that fails
// fails the layer and with it the whole operation.
// Workers run tasks outside the lock; one mutex guards the queue, the
// operations and the counters, and one condition variable wakes waiters
// whenever any layer finishes.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "core/check.h"
#include "transfer/transfer_engine.h"

namespace hiq {

std::string_view transfer_kind_name(TransferKind kind) {
  return kind == TransferKind::kBackup ? "backup" : "load";
}

Status check_transfer_slots(TransferKind kind, std::span<const SlotId> src, size_t src_slots,
                            std::span<const SlotId> dst, size_t dst_slots) {
    const std::string what(transfer_kind_name(kind));
    if (src.size() != dst.size())
      return invalid_argument(what + ": " + std::to_string(src.size()) + " source slots but " +
                              std::to_string(dst.size()) + " destination slots");
    for (SlotId s : src)
      if (s >= src_slots) return out_of_range(what + ": source slot " + std::to_string(s) + " beyond the pool");
    for (SlotId s : dst)
      if (s >= dst_slots) return out_of_range(what + ": destination slot " + std::to_string(s) + " beyond the pool");
  return Status::ok();
}

Status check_pools_match(const DeviceKvPool& l1, const HostKvPool& l2) {
  const KvGeometry &a = l1.geometry(), &b = l2.geometry();
  if (a.num_layers == b.num_layers && a.row_shape(KvPart::kK) == b.row_shape(KvPart::kK) &&
      a.row_shape(KvPart::kV) == b.row_shape(KvPart::kV))
    return Status::ok();
  return invalid_argument("L1 and L2 pools have different KV geometries");
}

Result<std::vector<RungGroup>> group_by_rung(const HostKvPool& l2, std::vector<SlotId>& l2_slots,
                                             std::vector<SlotId>& l1_slots) {
  HIQ_CHECK(l2_slots.size() == l1_slots.size());
  if (!l2.tiered()) return std::vector<RungGroup>{{0, 0, l2_slots.size()}};
  std::vector<std::vector<size_t>> by_rung(static_cast<size_t>(l2.rungs()));
  for (size_t i = 0; i < l2_slots.size(); ++i) {
    const int rung = l2.rung_of(l2_slots[i]);
    if (rung < 0)
      return failed_precondition("transfer: L2 slot " + std::to_string(l2_slots[i]) + " holds no token");
    by_rung[static_cast<size_t>(rung)].push_back(i);
  }
  std::vector<RungGroup> groups;
  std::vector<SlotId> l2_sorted, l1_sorted;
  l2_sorted.reserve(l2_slots.size());
  l1_sorted.reserve(l1_slots.size());
  for (size_t r = 0; r < by_rung.size(); ++r) {
    if (by_rung[r].empty()) continue;
    groups.push_back({static_cast<int>(r), l2_sorted.size(), l2_sorted.size() + by_rung[r].size()});
    for (size_t i : by_rung[r]) {
      l2_sorted.push_back(l2_slots[i]);
      l1_sorted.push_back(l1_slots[i]);
    }
  }
  l2_slots = std::move(l2_sorted);
  l1_slots = std::move(l1_sorted);
  return groups;
}

uint64_t group_bytes(const HostKvPool& l2, std::span<const RungGroup> groups) {
  uint64_t bytes = 0;
  for (const RungGroup& g : groups) bytes += (g.end - g.begin) * l2.bytes_per_token(g.rung);
  return bytes;
}

namespace {

using Clock = std::chrono::steady_clock;

enum class LayerState : uint8_t { kPending, kDone, kFailed };

struct Operation {
  Ticket ticket = 0;
  TransferKind kind = TransferKind::kBackup;
  std::vector<SlotId> src, dst;
  std::vector<RungGroup> groups;  // of src/dst, by the rung of the L2 slot
  std::vector<LayerState> layers;
  int layers_left = 0;
  Status status;  // the first failure, if any
  Clock::time_point submitted;

  bool complete() const { return layers_left == 0; }
};

class CpuTransferEngine final : public TransferEngine {
 public:
  CpuTransferEngine(std::vector<DeviceKvPool*> ranks, HostKvPool& l2, TransferEngineOptions options)
      : ranks_(std::move(ranks)), l1_(*ranks_.front()), l2_(l2), options_(std::move(options)) {
    for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { work(); });
  }

  ~CpuTransferEngine() override {
    drain();  // the pools' memory must not be touched after we return
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    work_cv_.notify_all();
    for (auto& w : workers_) w.join();
  }

  Result<Ticket> backup(std::span<const SlotId> l1_slots, std::span<const SlotId> l2_slots) override {
    return submit(TransferKind::kBackup, l1_slots, l1_.num_slots(), l2_slots, l2_.num_slots());
  }

  Result<Ticket> load(std::span<const SlotId> l2_slots, std::span<const SlotId> l1_slots) override {
    return submit(TransferKind::kLoad, l2_slots, l2_.num_slots(), l1_slots, l1_.num_slots());
  }

  Status wait_layer(Ticket ticket, int layer) override {
    std::unique_lock lock(mu_);
    Operation* op = find(ticket);
    if (!op) return unknown_ticket(ticket);
    if (layer < 0 || layer >= static_cast<int>(op->layers.size()))
      return out_of_range("layer " + std::to_string(layer) + " of a " + std::to_string(op->layers.size()) +
                          "-layer model");
    done_cv_.wait(lock, [&] { return op->layers[layer] != LayerState::kPending || !op->status.is_ok(); });
    return op->status;
  }

  Status wait(Ticket ticket) override {
    std::unique_lock lock(mu_);
    Operation* op = find(ticket);
    if (!op) return unknown_ticket(ticket);
    done_cv_.wait(lock, [&] { return op->complete(); });
    return op->status;
  }

  Result<bool> layer_ready(Ticket ticket, int layer) override {
    std::lock_guard lock(mu_);
    Operation* op = find(ticket);
    if (!op) return unknown_ticket(ticket);
    if (layer < 0 || layer >= static_cast<int>(op->layers.size())) return out_of_range("no such layer");
    return op->layers[layer] == LayerState::kDone && op->status.is_ok();
  }

  std::vector<Completion> poll() override {
    std::lock_guard lock(mu_);
    std::vector<Completion> out;
    while (!ops_.empty() && ops_.front()->complete()) {
      const Operation& op = *ops_.front();
      out.push_back({op.ticket, op.kind, op.src.size(), op.status});
      ops_.pop_front();
    }
    return out;
  }

  void drain() override {
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [&] { return inflight_ == 0; });
  }

  TransferStats stats() const override {
    std::lock_guard lock(mu_);
    return stats_;
  }

 private:
  Result<Ticket> submit(TransferKind kind, std::span<const SlotId> src, size_t src_slots, std::span<const SlotId> dst,
                        size_t dst_slots) {
    HIQ_RETURN_IF_ERROR(check_transfer_slots(kind, src, src_slots, dst, dst_slots));
    const std::string what(transfer_kind_name(kind));

    auto op = std::make_shared<Operation>();
    op->kind = kind;
    op->src.assign(src.begin(), src.end());
    op->dst.assign(dst.begin(), dst.end());
    auto groups = kind == TransferKind::kBackup ? group_by_rung(l2_, op->dst, op->src) : group_by_rung(l2_, op->src, op->dst);
    if (!groups) return groups.status().with_context(what);
    op->groups = std::move(*groups);
    const int layers = l1_.geometry().num_layers;
    op->layers.assign(static_cast<size_t>(layers), LayerState::kPending);
    op->layers_left = layers;
    op->submitted = Clock::now();
    {
      std::lock_guard lock(mu_);
      if (ops_.size() >= options_.max_inflight) {
        ++stats_.refused_ops;
        return resource_exhausted(what + ": " + std::to_string(ops_.size()) +
                                  " transfers are in flight or unacknowledged, the most allowed");
      }
      op->ticket = next_ticket_++;
      ++inflight_;
      ops_.push_back(op);
      for (int layer = 0; layer < layers; ++layer) queue_.push_back({op, layer});
    }
    work_cv_.notify_all();
    return op->ticket;
  }

  struct Task {
    std::shared_ptr<Operation> op;
    int layer;
  };

  void work() {
    while (true) {
      Task task;
      Status status;
      {
        std::unique_lock lock(mu_);
        work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and nothing left to do
        task = std::move(queue_.front());
        queue_.pop_front();
        status = task.op->status;  // a failed operation runs no further layers
      }
      Operation& op = *task.op;
      CodecStats codec;
      if (status.is_ok() && options_.before_layer) status = options_.before_layer(op.ticket, op.kind, task.layer);
      if (status.is_ok()) status = run_layer(op, task.layer, codec);
      finish_layer(op, task.layer, status, codec);
    }
  }

  // Layer `layer` of every rank; stops at the first rank whose hook fails.
  Status run_layer(const Operation& op, int layer, CodecStats& codec) {
    const int parts = l1_.geometry().rows_per_layer(), layers = l1_.geometry().num_layers;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      if (options_.before_rank_layer)
        HIQ_RETURN_IF_ERROR(options_.before_rank_layer(op.ticket, op.kind, static_cast<int>(r), layer));
      DeviceKvPool& l1 = *ranks_[r];
      const int record_layer = static_cast<int>(r) * layers + layer;
      for (const RungGroup& g : op.groups) {
        const auto src = std::span(op.src).subspan(g.begin, g.end - g.begin);
        const auto dst = std::span(op.dst).subspan(g.begin, g.end - g.begin);
        for (int p = 0; p < parts; ++p) {
          const auto part = static_cast<KvPart>(p);
          if (op.kind == TransferKind::kBackup) {
            encode_rows_indexed(l2_.layout(part, g.rung), l1.plane(layer, part), src,
                                l2_.plane(record_layer, part, g.rung), dst, &codec, options_.codec_impl,
                                l2_.record_stride(part));
          } else {
            decode_rows_indexed(l2_.layout(part, g.rung), l2_.plane(record_layer, part, g.rung), src,
                                l1.plane(layer, part), dst, options_.codec_impl, l2_.record_stride(part));
          }
        }
      }
    }
    return Status::ok();
  }

  void finish_layer(Operation& op, int layer, const Status& status, const CodecStats& codec) {
    {
      std::lock_guard lock(mu_);
      stats_.codec += codec;
      if (!status.is_ok() && op.status.is_ok()) op.status = status;
      op.layers[layer] = status.is_ok() ? LayerState::kDone : LayerState::kFailed;
      if (--op.layers_left == 0) {
        --inflight_;
        const double seconds = std::chrono::duration<double>(Clock::now() - op.submitted).count();
        const uint64_t tokens = op.src.size(), bytes = group_bytes(l2_, op.groups);
        if (!op.status.is_ok()) {
          ++stats_.failed_ops;
        } else if (op.kind == TransferKind::kBackup) {
          ++stats_.backup_ops;
          stats_.backup_tokens += tokens;
          stats_.backup_bytes += bytes;
          stats_.backup_seconds += seconds;
        } else {
          ++stats_.load_ops;
          stats_.load_tokens += tokens;
          stats_.load_bytes += bytes;
          stats_.load_seconds += seconds;
        }
      }
    }
    done_cv_.notify_all();
  }

  Operation* find(Ticket ticket) {
    for (auto& op : ops_)
      if (op->ticket == ticket) return op.get();
    return nullptr;
  }

  static Status unknown_ticket(Ticket ticket) {
    return not_found("transfer ticket " + std::to_string(ticket) + " is unknown or already acknowledged");
  }

  const std::vector<DeviceKvPool*> ranks_;  // one L1 pool per tensor-parallel rank, all of the same slots
  DeviceKvPool& l1_;                        // rank 0's: the geometry and slot count every rank shares
  HostKvPool& l2_;
  const TransferEngineOptions options_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Task> queue_;                      // layers waiting for a worker
  std::deque<std::shared_ptr<Operation>> ops_;  // submitted, not yet acknowledged, in order
  size_t inflight_ = 0;                         // submitted, not yet complete (≤ ops_.size())
  Ticket next_ticket_ = 1;
  bool stopping_ = false;
  TransferStats stats_;
  std::vector<std::thread> workers_;
};

}  // namespace

Result<std::unique_ptr<TransferEngine>> make_cpu_transfer_engine(DeviceKvPool& l1, HostKvPool& l2,
                                                                 TransferEngineOptions options) {
  DeviceKvPool* const ranks[] = {&l1};
  return make_cpu_transfer_engine(ranks, l2, std::move(options));
}

Result<std::unique_ptr<TransferEngine>> make_cpu_transfer_engine(std::span<DeviceKvPool* const> ranks, HostKvPool& l2,
                                                                 TransferEngineOptions options) {
  if (ranks.empty()) return invalid_argument("the CPU transfer engine needs at least one L1 pool");
  for (size_t r = 0; r < ranks.size(); ++r) {
    const std::string which = ranks.size() > 1 ? "rank " + std::to_string(r) + "'s L1 pool" : "the L1 pool";
    if (ranks[r] == nullptr) return invalid_argument("the CPU transfer engine: " + which + " is missing");
    if (!ranks[r]->host_accessible())
      return invalid_argument("the CPU transfer engine needs L1 pools in host memory, and " + which + " is not");
    const KvGeometry &a = ranks[r]->geometry(), &b = ranks[0]->geometry();
    if (a.num_layers != b.num_layers || a.row_shape(KvPart::kK) != b.row_shape(KvPart::kK) ||
        a.row_shape(KvPart::kV) != b.row_shape(KvPart::kV) || ranks[r]->num_slots() != ranks[0]->num_slots())
      return invalid_argument("the CPU transfer engine: " + which + " differs from rank 0's in KV geometry or slots");
  }
  if (ranks.size() == 1) {
    HIQ_RETURN_IF_ERROR(check_pools_match(*ranks[0], l2));
  } else {
    // The host pool holds every rank's records: its layers are the ranks' (memory/host_kv_pool.h).
    const KvGeometry &a = ranks[0]->geometry(), &b = l2.geometry();
    if (int64_t{a.num_layers} * static_cast<int64_t>(ranks.size()) != b.num_layers ||
        a.row_shape(KvPart::kK) != b.row_shape(KvPart::kK) || a.row_shape(KvPart::kV) != b.row_shape(KvPart::kV))
      return invalid_argument("the L2 pool does not hold " + std::to_string(ranks.size()) +
                              " ranks' records of their L1 pools' geometry (tp_host_geometry)");
  }
  if (options.workers < 1) return invalid_argument("the transfer engine needs at least one worker");
  if (options.max_inflight < 1) return invalid_argument("max_inflight must be at least 1");
  if (!codec_impl_supported(options.codec_impl))
    return unavailable("codec implementation " + std::string(codec_impl_name(options.codec_impl)) +
                       " is not supported on this CPU");
  return std::unique_ptr<TransferEngine>(
      new CpuTransferEngine(std::vector<DeviceKvPool*>(ranks.begin(), ranks.end()), l2, std::move(options)));
}

}  // namespace hiq
