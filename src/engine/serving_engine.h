// engine/serving_engine.h — the scheduler behind a server: one engine thread
// owns the scheduler, the cache and the model runner; any thread submits
// requests and reads their tokens as they are generated.
//
// submit() hands back a GenerationStream, a queue the engine thread fills
// with the request's tokens, one event per generated token, then one
// kFinished event carrying the RequestResult (usage, cached tokens by tier,
// finish reason). cancel() ends a request whose reader went away (or that hit
// a stop string): a waiting one at once, a running one at its next step, its
// KV kept in the tree. A failed forward pass fails the requests of that batch
// and the engine goes on; a failed restore is recomputed by the scheduler.
//
// Lifecycle: running → stop() (or destruction): no new requests; running and
// waiting ones are cancelled and receive their kFinished event; the thread
// joins. Everything the engine is given must outlive it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cache/radix_cache.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "memory/host_kv_pool.h"

namespace hiq {

struct GenerationEvent {
  enum class Kind : uint8_t { kToken, kFinished };
  Kind kind = Kind::kToken;
  size_t choice = 0;       // which of the stream's requests, in submission order
  TokenId token = 0;       // kToken: the choice's next generated token
  std::optional<TokenLogprobs> logprobs;       // kToken: when the request asked for them
  std::vector<TokenLogprobs> prompt_logprobs;  // a choice's first kToken: when the request asked for them
  RequestResult result;    // kFinished: the whole request
};

// The events of one or more requests submitted together (the n choices of
// one API call), in order for each. Filled by the engine thread, read by one
// reader thread. Each choice ends with its own kFinished event.
class GenerationStream {
 public:
  explicit GenerationStream(std::vector<uint64_t> ids) : ids_(std::move(ids)) {}
  // The request id of the first choice, and of every choice.
  uint64_t id() const { return ids_.front(); }
  const std::vector<uint64_t>& ids() const { return ids_; }
  size_t choices() const { return ids_.size(); }
  // The next event, waiting up to `timeout`; nullopt when none came.
  std::optional<GenerationEvent> next(std::chrono::milliseconds timeout);

 private:
  friend class ServingEngine;
  void push(GenerationEvent event);

  const std::vector<uint64_t> ids_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<GenerationEvent> events_;
};

// A snapshot for /metrics and reports, refreshed after every engine step.
struct ServingStats {
  RadixCacheStats cache;
  size_t waiting = 0, running = 0;
  uint64_t submitted = 0, finished = 0, failed = 0, cancelled = 0;
  uint64_t rejected_queue_full = 0;  // submissions refused by SchedulerOptions::max_queued_requests
  uint64_t prompt_tokens = 0, generated_tokens = 0;
  uint64_t cached_l1_tokens = 0, cached_l2_tokens = 0;  // prompt tokens served from each tier
  uint64_t cached_storage_tokens = 0;  // of cached_l2_tokens, those the storage tier fetched
  bool storage = false;                // a storage tier is attached
  StorageTierStats storage_tier;       // its counters (zeros without one)
  size_t l1_free_slots = 0;
  size_t l2_used_tokens = 0;  // 0 without a host tier
  TransferStats transfer;     // restores and backups: tokens, bytes, seconds (zeros without a host tier)
  SchedulerStats scheduler;   // steps, forward time and queueing
};

class ServingEngine {
 public:
  // `l2` (null without a host tier) is only read, for stats. `storage` (may
  // be null) is the third tier; the engine's thread alone uses it from here on.
  ServingEngine(RadixCache& cache, DeviceKvPool& l1, TransferEngine* engine, ModelRunner& runner,
                SchedulerOptions options = {}, const HostKvPool* l2 = nullptr, StorageTier* storage = nullptr);
  ~ServingEngine();
  ServingEngine(const ServingEngine&) = delete;
  ServingEngine& operator=(const ServingEngine&) = delete;

  // Queues `request` (its id is assigned here) and returns its stream.
  // Errors: an empty prompt or max_new_tokens < 1 (kInvalidArgument), bad
  // sampling parameters or logprobs, a full queue (kResourceExhausted, with
  // SchedulerOptions::max_queued_requests), or an engine that is stopping
  // (kUnavailable).
  Result<std::shared_ptr<GenerationStream>> submit(Request request);
  // Queues several requests (at least one) whose events share one stream;
  // all or none are queued.
  Result<std::shared_ptr<GenerationStream>> submit(std::vector<Request> choices);
  // Ends request `id` if it is still queued or running (see above).
  void cancel(uint64_t id);
  // Ends every request of `stream`.
  void cancel(const GenerationStream& stream);
  // Empties the cache's L1 and L2 (SGLang's /flush_cache) once nothing runs;
  // kFailedPrecondition while requests are queued or running.
  Status flush_cache();
  ServingStats stats() const;
  // Stops taking requests, cancels the rest, and joins the engine thread.
  void stop();
  // Whether stop() has begun: submissions are refused from then on.
  bool stopping() const;

 private:
  void loop();
  void dispatch();

  RadixCache& cache_;
  DeviceKvPool& l1_;
  const HostKvPool* l2_;
  TransferEngine* transfer_;
  ModelRunner& runner_;
  const SchedulerOptions options_;
  Scheduler scheduler_;
  StorageTier* storage_;

  mutable std::mutex mutex_;              // guards everything below
  std::condition_variable wake_;
  std::vector<Request> submissions_;
  size_t in_transit_ = 0;  // submissions the engine thread took and has not yet queued in the scheduler
  std::vector<uint64_t> cancellations_;
  // Each flush_cache() call waits on its own entry until the engine thread
  // answers it; calls that arrive together share one flush.
  struct FlushWaiter {
    std::optional<Status> result;
  };
  std::vector<FlushWaiter*> flush_waiters_;
  std::condition_variable flushed_;
  bool stopping_ = false;
  uint64_t next_id_ = 1;
  struct Reader {
    std::shared_ptr<GenerationStream> stream;
    size_t choice = 0;
  };
  std::unordered_map<uint64_t, Reader> streams_;  // request id → its stream
  std::unordered_map<uint64_t, Status> step_failures_;  // engine thread only: requests a failed step cancelled
  ServingStats stats_;
  std::thread thread_;
};

}  // namespace hiq
