// transfer/transfer_engine.h — moves KV between the tiers; the only place that
// encodes (L1 → L2, "backup") or decodes (L2 → L1, "load").
//
// Operations are asynchronous. Each submission returns a ticket at once; the
// work runs layer by layer on the engine's workers (CPU) or streams (CUDA):
//
//   submitted → layer 0 ready → layer 1 ready → … → complete (ok or failed)
//                                                      → acknowledged by poll()
//
// A consumer of a load can wait for layer i alone (wait_layer) and run that
// layer's attention while later layers are still arriving. poll() hands back
// completions strictly in submission order, each exactly once; after that the
// ticket is forgotten.
//
// Contract with the caller (the cache): the slots named in an operation stay
// allocated, and the L1 slots of a backup stay locked (not rewritten, not
// freed), until the operation completes. A failed operation leaves its
// destination slots with undefined contents: the caller must not serve them
// (it frees them and recomputes). The engine bounds the operations it holds
// (in flight or completed but not yet acknowledged by poll()); a submission
// beyond the bound is refused (kResourceExhausted), not queued.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "codec/codec.h"
#include "core/status.h"
#include "memory/device_kv_pool.h"
#include "memory/host_kv_pool.h"

namespace hiq {

using Ticket = uint64_t;

enum class TransferKind : uint8_t { kBackup, kLoad };
std::string_view transfer_kind_name(TransferKind kind);

struct Completion {
  Ticket ticket = 0;
  TransferKind kind = TransferKind::kBackup;
  size_t tokens = 0;
  Status status;  // OK, or why the operation failed
};

// Counters since the engine was created; they feed the cache's metrics.
struct TransferStats {
  uint64_t backup_ops = 0, backup_tokens = 0, backup_bytes = 0;  // bytes: encoded records written to L2
  uint64_t load_ops = 0, load_tokens = 0, load_bytes = 0;        // bytes: encoded records read from L2
  double backup_seconds = 0, load_seconds = 0;                   // submission to completion, summed
  uint64_t failed_ops = 0;
  uint64_t refused_ops = 0;                                      // submissions beyond max_inflight
  CodecStats codec;                                              // rows encoded, non-finite heads seen
};

struct TransferEngineOptions {
  int workers = 2;            // CPU: worker threads
  size_t max_inflight = 64;   // operations submitted and not yet acknowledged by poll()
  CodecImpl codec_impl = CodecImpl::kAuto;  // CPU: which codec implementation
  int gpu_sms = 16;           // CUDA: most multiprocessors one transfer kernel occupies (one block each)
  // Test hook, called before each layer of each operation — on a worker (CPU),
  // or at submission as each layer is enqueued (CUDA); a non-OK status fails
  // the operation (fault injection), and the hook may block (to hold an
  // operation at a chosen layer). Null in production.
  std::function<Status(Ticket, TransferKind, int layer)> before_layer;
  // Test hook of the CPU engine over several tensor-parallel ranks: called
  // before each rank's part of each layer (after before_layer), on a worker;
  // a non-OK status fails the operation (one rank failing). Null in production.
  std::function<Status(Ticket, TransferKind, int rank, int layer)> before_rank_layer;
};

class TransferEngine {
 public:
  virtual ~TransferEngine() = default;

  // Encodes the KV of L1 slot `l1_slots[i]` (every layer, K and V) into L2
  // slot `l2_slots[i]`. Errors (nothing queued): unequal lengths, a slot out of
  // range, too many operations in flight.
  virtual Result<Ticket> backup(std::span<const SlotId> l1_slots, std::span<const SlotId> l2_slots) = 0;
  // Decodes L2 slot `l2_slots[i]` into L1 slot `l1_slots[i]`, layer 0 first.
  virtual Result<Ticket> load(std::span<const SlotId> l2_slots, std::span<const SlotId> l1_slots) = 0;

  // Blocks until layer `layer` of the operation is done; returns the
  // operation's error if it failed. kNotFound for a ticket already acknowledged
  // (or never issued).
  virtual Status wait_layer(Ticket ticket, int layer) = 0;
  // Blocks until the whole operation is done; its status.
  virtual Status wait(Ticket ticket) = 0;
  // Non-blocking: whether layer `layer` is done (false also for a failed one).
  virtual Result<bool> layer_ready(Ticket ticket, int layer) = 0;

  // Completed operations not yet acknowledged, in submission order, stopping at
  // the first incomplete one.
  virtual std::vector<Completion> poll() = 0;
  // Blocks until every submitted operation is complete.
  virtual void drain() = 0;

  virtual TransferStats stats() const = 0;
};

// The checks every engine makes. At submission: equal lengths, every slot
// inside its pool (kInvalidArgument, kOutOfRange). At creation: L1 and L2 of
// the same KV geometry.
Status check_transfer_slots(TransferKind kind, std::span<const SlotId> src, size_t src_slots,
                            std::span<const SlotId> dst, size_t dst_slots);
Status check_pools_match(const DeviceKvPool& l1, const HostKvPool& l2);

// The tokens of one transfer whose L2 records have one rung's codec: pairs
// [begin, end) of the transfer's slot lists.
struct RungGroup {
  int rung = 0;
  size_t begin = 0, end = 0;
};
// Orders a transfer's slot pairs by the rung of their L2 slot (stably,
// changing both lists alike) and returns the groups; one group, nothing
// moved, for a pool of one codec. kFailedPrecondition when a tiered pool's
// slot is not allocated (its rung is unknown).
Result<std::vector<RungGroup>> group_by_rung(const HostKvPool& l2, std::vector<SlotId>& l2_slots,
                                             std::vector<SlotId>& l1_slots);
// Encoded bytes of the groups' records.
uint64_t group_bytes(const HostKvPool& l2, std::span<const RungGroup> groups);

// The CPU engine: L1 must be host-accessible. Both pools must outlive it.
Result<std::unique_ptr<TransferEngine>> make_cpu_transfer_engine(DeviceKvPool& l1, HostKvPool& l2,
                                                                 TransferEngineOptions options = {});
// The CPU engine under tensor parallelism: ranks[r] is rank r's L1 pool (all
// of one geometry and slot count, addressed by the same slots), and `l2`
// holds every rank's records, rank r's layer l at the pool's layer r·L + l
// (tp_host_geometry, memory/host_kv_pool.h). An operation names each slot
// once and moves it on every rank; layer l is ready (wait_layer,
// layer_ready) only once every rank's part of it is, and a rank that fails
// fails the whole operation, whose destination then holds nothing to serve.
// One rank is the engine above. The pools must outlive it.
Result<std::unique_ptr<TransferEngine>> make_cpu_transfer_engine(std::span<DeviceKvPool* const> ranks, HostKvPool& l2,
                                                                 TransferEngineOptions options = {});

}  // namespace hiq
