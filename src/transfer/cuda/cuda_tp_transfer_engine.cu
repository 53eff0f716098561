// transfer/cuda/cuda_tp_transfer_engine.cu — a tensor-parallel group's
// transfers (transfer/cuda_transfer_engine.h): one operation is a part on
// every rank's engine, each on its own GPU, over the one host pool.
//
// A part is acknowledged by its rank's engine only in poll(), which marks it
// done here; waits then skip it (its status is already the operation's).
// Every call into a rank's engine runs with that rank's GPU current, since
// an engine launches on the current device.
#include <cuda_runtime.h>

#include <algorithm>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/buffers.h"
#include "cuda/check.cuh"
#include "memory/cuda_device_kv_pool.h"
#include "transfer/cuda_transfer_engine.h"

namespace hiq {
namespace {

using cuda::DeviceScope;

Status rank_error(int rank, const Status& status) {
  return Status(status.code(), "rank " + std::to_string(rank) + ": " + status.message());
}

class TpEngine final : public CudaTpTransferEngine {
 public:
  TpEngine(std::vector<int> devices, PinnedHostMemory pinned)
      : pinned_(std::move(pinned)), devices_(std::move(devices)) {}
  ~TpEngine() override { drain(); }  // the rank engines go first (declared last), then the pinning

  void add_rank(std::unique_ptr<CudaTransferEngine> engine) { ranks_.push_back(std::move(engine)); }

  Result<Ticket> backup(std::span<const SlotId> l1_slots, std::span<const SlotId> l2_slots) override {
    return submit(TransferKind::kBackup, l1_slots, l2_slots);
  }
  Result<Ticket> load(std::span<const SlotId> l2_slots, std::span<const SlotId> l1_slots) override {
    return submit(TransferKind::kLoad, l2_slots, l1_slots);
  }

  Status wait_layer(Ticket ticket, int layer) override {
    return for_each_pending(ticket, [&](CudaTransferEngine& e, Ticket part) { return e.wait_layer(part, layer); });
  }
  Status wait(Ticket ticket) override {
    return for_each_pending(ticket, [&](CudaTransferEngine& e, Ticket part) { return e.wait(part); });
  }

  Result<bool> layer_ready(Ticket ticket, int layer) override {
    std::lock_guard lock(mu_);
    HIQ_ASSIGN_OR_RETURN(Operation * op, find(ticket));
    if (!op->status.is_ok()) return false;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      if (op->done[r]) continue;
      const DeviceScope scope(devices_[r]);
      HIQ_ASSIGN_OR_RETURN(const bool ready, ranks_[r]->layer_ready(op->parts[r], layer));
      if (!ready) return false;
    }
    return true;
  }

  Status stream_wait_rank_layer(Ticket ticket, int rank, int layer, void* stream) override {
    std::lock_guard lock(mu_);
    HIQ_ASSIGN_OR_RETURN(Operation * op, find(ticket));
    if (rank < 0 || rank >= ranks()) return invalid_argument("no tensor-parallel rank " + std::to_string(rank));
    if (!op->status.is_ok()) return op->status;
    const auto r = static_cast<size_t>(rank);
    if (op->done[r]) return Status::ok();  // that part is complete: nothing to wait for
    return ranks_[r]->stream_wait_layer(op->parts[r], layer, stream);
  }

  std::vector<Completion> poll() override {
    std::lock_guard lock(mu_);
    collect();
    std::vector<Completion> out;
    while (!ops_.empty() && ops_.front().complete()) {
      const Operation& op = ops_.front();
      out.push_back({op.ticket, op.kind, op.tokens, op.status});
      TransferStats& s = counted_;
      (op.kind == TransferKind::kBackup ? s.backup_ops : s.load_ops) += 1;
      (op.kind == TransferKind::kBackup ? s.backup_tokens : s.load_tokens) += op.tokens;
      if (!op.status.is_ok()) ++s.failed_ops;
      ops_.pop_front();
    }
    return out;
  }

  void drain() override {
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const DeviceScope scope(devices_[r]);
      ranks_[r]->drain();
    }
  }

  TransferStats stats() const override {
    std::lock_guard lock(mu_);
    TransferStats s = counted_;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const DeviceScope scope(devices_[r]);
      const TransferStats t = ranks_[r]->stats();
      s.backup_bytes += t.backup_bytes;
      s.load_bytes += t.load_bytes;
      s.backup_seconds += t.backup_seconds;
      s.load_seconds += t.load_seconds;
      s.codec += t.codec;
    }
    return s;
  }

  int ranks() const override { return static_cast<int>(ranks_.size()); }

 private:
  struct Operation {
    Ticket ticket = 0;
    TransferKind kind = TransferKind::kBackup;
    size_t tokens = 0;
    std::vector<Ticket> parts;  // per rank; 0: never queued there
    std::vector<bool> done;     // per rank: acknowledged by its engine (or never queued)
    Status status;              // the first rank's error
    bool complete() const { return std::find(done.begin(), done.end(), false) == done.end(); }
  };

  Result<Ticket> submit(TransferKind kind, std::span<const SlotId> from, std::span<const SlotId> to) {
    std::lock_guard lock(mu_);
    Operation op;
    op.kind = kind;
    op.tokens = from.size();
    op.parts.assign(ranks_.size(), 0);
    op.done.assign(ranks_.size(), false);
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const DeviceScope scope(devices_[r]);
      Result<Ticket> part = scope.status().is_ok() ? (kind == TransferKind::kBackup ? ranks_[r]->backup(from, to)
                                                                                     : ranks_[r]->load(from, to))
                                                   : Result<Ticket>(scope.status());
      if (part) {
        op.parts[r] = *part;
        continue;
      }
      if (r == 0) {  // nothing queued anywhere: refused, as by any engine
        if (part.status().code() == StatusCode::kResourceExhausted) ++counted_.refused_ops;
        return part.status();
      }
      op.done[r] = true;  // the parts queued on earlier ranks run out; the operation fails
      if (op.status.is_ok()) op.status = rank_error(static_cast<int>(r), part.status());
    }
    op.ticket = next_ticket_++;
    ops_.push_back(std::move(op));
    return ops_.back().ticket;
  }

  Result<Operation*> find(Ticket ticket) {
    for (Operation& op : ops_)
      if (op.ticket == ticket) return &op;
    return not_found("no transfer with ticket " + std::to_string(ticket));
  }

  // Takes the ranks' completions into their operations.
  void collect() {
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const DeviceScope scope(devices_[r]);
      for (const Completion& c : ranks_[r]->poll())
        for (Operation& op : ops_) {
          if (op.done[r] || op.parts[r] != c.ticket) continue;
          op.done[r] = true;
          if (!c.status.is_ok() && op.status.is_ok()) op.status = rank_error(static_cast<int>(r), c.status);
          break;
        }
    }
  }

  // Runs `wait(engine, part)` for every rank's part not yet acknowledged,
  // outside the lock; the operation's status after.
  template <typename Wait>
  Status for_each_pending(Ticket ticket, Wait&& wait) {
    std::vector<std::pair<size_t, Ticket>> pending;
    {
      std::lock_guard lock(mu_);
      HIQ_ASSIGN_OR_RETURN(Operation * op, find(ticket));
      for (size_t r = 0; r < ranks_.size(); ++r)
        if (!op->done[r]) pending.emplace_back(r, op->parts[r]);
    }
    Status first;
    for (const auto& [r, part] : pending) {
      const DeviceScope scope(devices_[r]);
      const Status s = wait(*ranks_[r], part);
      // kNotFound: a poll() acknowledged the part meanwhile (its status is the operation's now).
      if (!s.is_ok() && s.code() != StatusCode::kNotFound && first.is_ok()) first = rank_error(static_cast<int>(r), s);
    }
    std::lock_guard lock(mu_);
    Result<Operation*> op = find(ticket);
    if (!op) return first;  // acknowledged whole meanwhile: the waits above are its parts' word
    return (*op)->status.is_ok() ? first : (*op)->status;
  }

  PinnedHostMemory pinned_;  // first in, last out: unpinned after every rank engine is gone
  std::vector<int> devices_;
  mutable std::mutex mu_;
  std::deque<Operation> ops_;  // submitted, not yet acknowledged, in order
  Ticket next_ticket_ = 1;
  TransferStats counted_;  // ops, tokens, failures and refusals of the group's operations
  std::vector<std::unique_ptr<CudaTransferEngine>> ranks_;
};

}  // namespace

Result<std::unique_ptr<CudaTpTransferEngine>> make_cuda_tp_transfer_engine(std::span<DeviceKvPool* const> ranks,
                                                                           std::span<const int> devices,
                                                                           HostKvPool& l2,
                                                                           TransferEngineOptions options) {
  if (ranks.empty() || ranks.size() != devices.size())
    return invalid_argument("a tensor-parallel transfer engine needs one GPU per rank pool");
  HIQ_RETURN_IF_ERROR(cuda::require_gpu());
  // Registered portable and mapped: every GPU reaches it at the same address.
  HIQ_ASSIGN_OR_RETURN(PinnedHostMemory pinned, PinnedHostMemory::pin(l2.plane(0, KvPart::kK), l2.reserved_bytes()));
  auto engine = std::make_unique<TpEngine>(std::vector<int>(devices.begin(), devices.end()), std::move(pinned));
  const int size = static_cast<int>(ranks.size());
  for (int r = 0; r < size; ++r) {
    if (ranks[static_cast<size_t>(r)] == nullptr) return invalid_argument("rank " + std::to_string(r) + " has no pool");
    const DeviceScope scope(devices[static_cast<size_t>(r)]);
    HIQ_RETURN_IF_ERROR(scope.status());
    auto part = make_cuda_rank_transfer_engine(*ranks[static_cast<size_t>(r)], l2, r, size, options);
    if (!part) return rank_error(r, part.status());
    engine->add_rank(std::move(*part));
  }
  return std::unique_ptr<CudaTpTransferEngine>(std::move(engine));
}

}  // namespace hiq
