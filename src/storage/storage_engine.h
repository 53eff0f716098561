// storage/storage_engine.h — the asynchronous front of L3: batches run on
// worker threads; the scheduler submits and polls, and never blocks on a disk
// or a network. The cache's storage tier (cache/storage_tier.h) and the
// benchmarks reach storage only through it.
//
// An operation's life:
//
//   submitted (queued) → running on a worker → finished → collected by poll() or wait()
//
// Every submitted ticket is handed back exactly once, by poll() or by wait(),
// in the order operations finish (not the order they were submitted). All
// methods are thread-safe, but a ticket is collected once: a thread that
// means to wait() for a ticket must not race a poll() on another thread,
// which may collect it first (wait() then answers kFailedPrecondition). The
// engine owns the keys and values it is given until then.
//
// Pages, not values, are what callers see: a get checks every value with
// decode_value (the caller's fingerprint and payload size) and yields the
// payloads of the run of hits from the first key (the first missing or
// unusable value ends it); a set may take the payloads and write the headers
// itself. Callers that keep pages elsewhere (the host tier's records) pass a
// PageSink or PageSource, which the worker calls to copy each page straight
// out of or into place; whatever they touch must stay valid, and untouched
// by others, until the ticket is collected. An unusable value (corrupt,
// truncated, foreign) is counted in `corrupt_values` and removed from the
// backend, so the page is recomputed and stored again rather than failing
// every time.
//
// Failures never reach the KV a request uses: a failed operation (backend
// down, disk full) completes with its Status and no hits, and is counted; the
// caller recomputes.
//
// Reads go first. A request waits in the queue for its probe and fetch,
// while writes only keep storage warm: workers take exists and get before
// any set, and with two or more workers at most all but one run sets, so a
// read never queues behind a backlog of writes to a slow backend.
//
// With no threads the engine runs each operation inline, in submit
// (simulations and tests, which must be deterministic). Destroying the engine
// drops queued operations (they are never reported, and their sinks and
// sources never run) and waits for running ones; drain() first to finish
// them instead.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "storage/storage_backend.h"
#include "storage/storage_key.h"

namespace hiq {

// Counters since the engine was created; they feed /metrics.
struct StorageStats {
  uint64_t exists_calls = 0, exists_hit_blocks = 0, exists_miss_blocks = 0;  // miss: keys after the run of hits
  uint64_t get_calls = 0, hit_blocks = 0, miss_blocks = 0;                   // pages returned / not returned by gets
  uint64_t set_calls = 0, set_blocks = 0;                                    // set_blocks: pages stored
  uint64_t set_skipped_blocks = 0;  // of set_blocks, held already and not written again (skip_stored)
  uint64_t bytes_read = 0, bytes_written = 0;     // values (headers included) from and to the backend
  double exists_seconds = 0, get_seconds = 0, set_seconds = 0;  // on the workers, summed
  uint64_t exists_errors = 0, get_errors = 0, set_errors = 0;  // operations that failed (backend down, disk full, I/O error)
  uint64_t corrupt_values = 0;  // values that failed decode_value (also counted in miss_blocks)
  uint64_t errors() const { return exists_errors + get_errors + set_errors; }
};

enum class StorageOp : uint8_t { kExists, kGet, kSet };

class StorageEngine {
 public:
  using Ticket = uint64_t;
  // Called on the worker for page `index` of a get, in key order, for each
  // page of the run of hits: `payload` is valid only during the call.
  using PageSink = std::function<void(size_t index, std::span<const std::byte> payload)>;
  // Called on the worker to fill page `index` of a set (all of `payload`).
  using PageSource = std::function<void(size_t index, std::span<std::byte> payload)>;

  // `threads` workers call `backend` (non-null); 0: every operation runs
  // inline in its submit call.
  explicit StorageEngine(std::unique_ptr<StorageBackend> backend, int threads = 2);
  ~StorageEngine();
  StorageEngine(const StorageEngine&) = delete;
  StorageEngine& operator=(const StorageEngine&) = delete;

  StorageBackend& backend() { return *backend_; }

  // hits: how many of `keys`, from the first, are held.
  Ticket submit_exists(std::vector<StorageKey> keys);
  // hits: the run of usable pages from the first key. Their payloads, each
  // `payload_bytes` long, go to `sink` when there is one, else into the
  // completion's `payloads`.
  Ticket submit_get(std::vector<StorageKey> keys, StorageFingerprint fp, size_t payload_bytes, PageSink sink = {});
  // Stores a page under each key: `source` fills its `payload_bytes`, and the
  // engine writes the header (storage_value.h) around it. hits: the pages
  // stored (all or, on error, 0 — some may have been stored all the same).
  // With `skip_stored`, the run of keys from the first that storage already
  // holds (another server wrote them) is neither gathered nor written; they
  // count as stored (and in `set_skipped_blocks`).
  Ticket submit_set(std::vector<StorageKey> keys, StorageFingerprint fp, size_t payload_bytes, PageSource source,
                    bool skip_stored = false);
  // Stores values[i], a whole value (encode_value's or seal_value's output),
  // under keys[i]; `skip_stored` as above.
  Ticket submit_set(std::vector<StorageKey> keys, std::vector<std::vector<std::byte>> values, bool skip_stored = false);

  struct Completion {
    Ticket ticket = 0;
    StorageOp op = StorageOp::kExists;
    Status status;  // OK, or why the backend failed
    size_t hits = 0;
    std::vector<std::vector<std::byte>> payloads;  // get without a sink only
    // A get's keys whose values were unusable (corrupt, foreign, truncated);
    // the engine removed them from the backend (or logged why it could not).
    std::vector<StorageKey> removed;
  };
  // The operations finished since the last poll, never blocking.
  std::vector<Completion> poll();
  // Blocks until `ticket` finishes and returns it (poll() will not). A ticket
  // that was never issued or was already collected completes at once with
  // kFailedPrecondition.
  Completion wait(Ticket ticket);
  // Blocks until a finished operation awaits collection or `seconds` pass;
  // whether one does.
  bool wait_for_completion(double seconds);
  // Blocks until no operation is queued or running (they may await collection).
  void drain();
  // Submitted and not yet collected.
  size_t outstanding() const;

  StorageStats stats() const;

 private:
  struct Operation {
    Ticket ticket = 0;
    StorageOp op = StorageOp::kExists;
    std::vector<StorageKey> keys;
    StorageFingerprint fp;
    size_t payload_bytes = 0;
    std::vector<std::vector<std::byte>> values;
    PageSink sink;
    PageSource source;
    bool skip_stored = false;
  };

  Ticket submit(Operation operation);
  void work();
  Completion run(Operation& operation);

  std::unique_ptr<StorageBackend> backend_;

  mutable std::mutex mutex_;  // guards everything below
  std::condition_variable work_ready_, finished_;
  bool stopping_ = false;
  Ticket next_ticket_ = 1;
  std::deque<Operation> reads_, writes_;  // queued: exists and get / set
  std::deque<Completion> done_;
  std::unordered_set<Ticket> outstanding_;  // submitted, not yet collected
  size_t running_ = 0;                      // taken by a worker, not yet finished
  size_t running_writes_ = 0;               // of those, sets
  size_t max_running_writes_ = 1;           // all workers but one (at least one)
  StorageStats stats_;

  std::vector<std::thread> workers_;  // last: started after everything they use
};

}  // namespace hiq
