// engine/scheduler.h — continuous batching over the hierarchical cache.
//
// A request goes: waiting → admitted (prefix matched, its L1 part locked, its
// host part restored through the transfer engine, L1 slots allocated for the
// rest of the prompt, and its output tokens counted against L1) → prefilled (first token; prompt
// KV inserted into the tree) → decoding (one token per step) → finished (all
// KV inserted, locks released, unused slots freed). Each step either prefills
// the requests that fit the step's token budget or, when none can be admitted,
// runs one decode step of every running request. A request that can never fit
// in L1 is rejected with a reason; one that cannot fit now waits, and its
// failed admission changes nothing (no eviction, no restore). One that fits
// once backups in flight settle (those finish() just issued, which pin the
// finished requests' L1) waits for them and is admitted in the same step. A
// restore that fails sends its request back to the queue to be recomputed.
#pragma once

#include <algorithm>
#include <deque>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "cache/radix_cache.h"
#include "cache/storage_tier.h"
#include "engine/model_runner.h"
#include "engine/workload.h"
#include "memory/device_kv_pool.h"

namespace hiq {

// The order in which waiting requests are offered admission (SGLang's
// --schedule-policy). FCFS: arrival order. LPM (longest prefix match): the
// request with the most prompt tokens already in L1 first, then arrival
// order. L1 is what admission waits for, and those tokens need no new slots:
// requests that share a running request's prefix run beside it. (A prefix in
// L2 needs slots like a computed one, so ranking by it too only reorders the
// rest; measured in docs/scheduling.md.) A request that `max_overtakes` later
// arrivals have overtaken goes first: LPM never starves one with nothing
// cached.
enum class SchedulePolicy : uint8_t { kFcfs, kLpm };
std::string_view schedule_policy_name(SchedulePolicy policy);
Result<SchedulePolicy> parse_schedule_policy(std::string_view name);

struct SchedulerOptions {
  size_t max_prefill_tokens = 16384;  // new prompt tokens per prefill step (SGLang --max-prefill-tokens)
  size_t max_running_requests = 256;  // requests admitted at once
  size_t in_batch_prefix_tokens = 32;  // defer a request that would compute this much of a batch-mate's prefix; 0: off
  // A failed forward pass (other than a failed restore, which is always
  // recomputed): false returns the error from step() (the simulator, where it
  // is a bug); true finishes the batch's requests with that error and goes on
  // (a server, which must survive it).
  bool fail_requests_on_model_error = false;
  // Requests that may wait for admission (SGLang --max-queued-requests); a
  // server refuses more with kResourceExhausted (ServingEngine::submit). 0: no bound.
  size_t max_queued_requests = 0;
  SchedulePolicy policy = SchedulePolicy::kLpm;   // --schedule-policy
  size_t max_overtakes = 64;                      // LPM's bound on how often a request is passed over
  // Output slots are allocated a decode step at a time; admission counts this
  // fraction of the outputs running requests may still generate (most stop
  // before max_tokens), and each decode step lowers it by
  // (new_token_ratio − min_new_token_ratio) / new_token_ratio_decay_steps.
  // When decode then runs out of L1, requests are retracted (back to the
  // queue, their KV into the cache) and the ratio goes to 1, decaying again
  // from there. SGLang's defaults (0.7, 0.098, 600); 1 and 1: never
  // over-commit, never retract.
  double new_token_ratio = 0.7;
  double min_new_token_ratio = 0.098;
  size_t new_token_ratio_decay_steps = 600;
  // A request's outputs count at most this many (SGLang's
  // CLIP_MAX_NEW_TOKENS_ESTIMATION): a chat request without max_tokens may
  // ask for 32,768 and stop after a few hundred.
  size_t clip_max_new_tokens_estimation = 4096;
  // A prompt with more than this many tokens left to compute is prefilled in
  // chunks of it (rounded down to whole pages), one a step, alternating with
  // the running requests' decode steps (SGLang --chunked-prefill-size). 0: off.
  size_t chunked_prefill_size = 8192;

  Status validate() const;  // errors name the field
};

enum class FinishReason : uint8_t {
  kLength,     // max_new_tokens reached
  kStop,       // a stop token was generated
  kCancelled,  // cancel() (a client went away, or a stop string was seen)
  kError,      // rejected, or the model failed: `status` says why
};

struct RequestResult {
  uint64_t id = 0;
  Request request;                       // as submitted (its prompt, group)
  Status status;                         // OK, or why the request was rejected
  size_t prompt_tokens = 0;
  size_t cached_l1_tokens = 0;           // prompt tokens found in L1
  size_t cached_l2_tokens = 0;           // prompt tokens restored from L2
  size_t cached_storage_tokens = 0;      // of those, tokens the storage tier fetched for it
  std::vector<TokenId> output;
  FinishReason finish_reason = FinishReason::kLength;
  // Runner clock, seconds: submitted, admitted to a prefill batch (the last
  // time, if a failed restore sent it back), first token, finished.
  double arrival = 0, admitted = 0, first_token = 0, finish = 0;
  double ttft() const { return first_token - arrival; }
};

// One generated token, as take_new_tokens() hands it out.
struct GeneratedToken {
  uint64_t request = 0;
  TokenId token = 0;
  std::optional<TokenLogprobs> logprobs;       // when the request asked (Request::logprobs ≥ 0)
  std::vector<TokenLogprobs> prompt_logprobs;  // with a request's first token, when it asked (Request::prompt_logprobs)
};

// What the scheduler has done so far, cumulative. TTFT splits into queueing
// (arrival → admission) and the prefill step itself; a long queue with short
// steps means admission was blocked, which `admission_waits` counts.
struct SchedulerStats {
  uint64_t prefill_steps = 0, decode_steps = 0;
  double prefill_seconds = 0, decode_seconds = 0;  // runner clock spent in forward passes of each kind
  uint64_t admitted = 0;       // requests admitted to a prefill batch that ran
  double queue_seconds = 0;    // their arrival → admission, summed
  uint64_t admission_waits = 0;  // steps whose head of the queue fit the budget but not into L1 yet
  uint64_t transfer_drains = 0;  // steps that waited for the cache's transfers with nothing else to run
  uint64_t retractions = 0;      // running requests sent back to the queue when decode ran out of L1
  uint64_t prefill_chunks = 0;   // prefill steps that computed a chunk of a prompt, not its end
  uint64_t storage_waits = 0;    // steps in which nothing ran but storage prefetches were awaited
};

class Scheduler {
 public:
  Scheduler(RadixCache& cache, DeviceKvPool& l1, TransferEngine* engine, ModelRunner& runner,
            SchedulerOptions options = {});
  ~Scheduler();

  // A third tier (may be null; must outlive the scheduler): every submitted
  // prompt is looked up in storage while it waits, and admission waits for
  // that as the tier's prefetch policy says.
  void set_storage(StorageTier* storage) { storage_ = storage; }

  void submit(Request request, double arrival);
  // Ends request `id`: a waiting one at once, a running one at the start of
  // the next step (its KV is kept in the tree). False when it is unknown or
  // already finished.
  bool cancel(uint64_t id);
  // One iteration. Returns false once nothing is waiting or running; an error
  // is a bug that must stop the run (e.g. the simulated model read wrong KV).
  Result<bool> step();
  std::vector<RequestResult> take_finished();
  // The tokens generated since the last call, in order, with the
  // log-probabilities their requests asked for.
  std::vector<GeneratedToken> take_new_tokens();
  size_t waiting() const { return waiting_.size(); }
  size_t running() const { return running_.size() + (chunked_ ? 1 : 0); }
  const SchedulerStats& stats() const { return stats_; }

 private:
  struct Active;
  enum class Admission { kAdmitted, kWait, kRejected };
  Admission admit(Active& a);
  void order_waiting();
  static constexpr size_t kLpmWindow = 128;  // waiting requests LPM matches per step
  // Tells the runner how long L1 eviction waited for transfers since the
  // cache's l1_eviction_wait_tokens was `wait_tokens_before`.
  void charge_eviction_waits(uint64_t wait_tokens_before);
  size_t usable_prefix(const Active& a) const;
  void retract_one();
  size_t chunk_size() const;
  bool set_chunk_end(Active& a) const;
  void place_prefilled(std::vector<std::unique_ptr<Active>>& batch);
  bool busy() const { return !waiting_.empty() || !running_.empty() || chunked_ != nullptr; }
  void emit(Active& a, ForwardResult& result);
  void hand_kv_to_cache(Active& a);
  Status prefill(std::vector<std::unique_ptr<Active>>& batch);
  Status decode();
  void finish(Active& a, FinishReason reason);
  void fail(Active& a, const Status& error);
  void release(Active& a);

  RadixCache& cache_;
  StorageTier* storage_ = nullptr;
  DeviceKvPool& l1_;
  TransferEngine* engine_;
  ModelRunner& runner_;
  SchedulerOptions options_;
  std::deque<std::unique_ptr<Active>> waiting_;
  uint64_t submitted_ = 0;  // requests submitted so far: the next one's arrival rank
  // Output slots running requests' decode steps will still allocate, each
  // request's clipped at options_.clip_max_new_tokens_estimation.
  size_t committed_outputs_ = 0;
  size_t clipped(size_t outputs) const { return std::min(outputs, options_.clip_max_new_tokens_estimation); }
  double new_token_ratio_;        // of committed_outputs_ that admission counts
  double new_token_ratio_decay_;
  std::vector<std::unique_ptr<Active>> running_;
  std::unique_ptr<Active> chunked_;  // admitted, its prompt prefilled a chunk a step
  bool last_step_was_chunk_ = false;
  std::vector<RequestResult> finished_;
  std::vector<GeneratedToken> new_tokens_;
  SchedulerStats stats_;
};

}  // namespace hiq
