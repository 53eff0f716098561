#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/check.h"

namespace hiq {
namespace {

// What a forward item carries: null for greedy requests (the fast path).
const SamplingParams* sampling_of(const Request& r) { return r.sampling.greedy() ? nullptr : &r.sampling; }

}  // namespace

Status SchedulerOptions::validate() const {
  if (max_prefill_tokens < 1) return invalid_argument("max_prefill_tokens must be positive");
  if (max_running_requests < 1) return invalid_argument("max_running_requests must be positive");
  if (clip_max_new_tokens_estimation < 1) return invalid_argument("clip_max_new_tokens_estimation must be positive");
  if (!(min_new_token_ratio > 0 && min_new_token_ratio <= new_token_ratio && new_token_ratio <= 1))
    return invalid_argument("new_token_ratio and min_new_token_ratio must satisfy 0 < min_new_token_ratio <= "
                            "new_token_ratio <= 1 (got " + std::to_string(new_token_ratio) + " and " +
                            std::to_string(min_new_token_ratio) + ")");
  return Status::ok();
}

std::string_view schedule_policy_name(SchedulePolicy policy) {
  switch (policy) {
    case SchedulePolicy::kFcfs: return "fcfs";
    case SchedulePolicy::kLpm: return "lpm";
  }
  return "unknown";
}

Result<SchedulePolicy> parse_schedule_policy(std::string_view name) {
  for (SchedulePolicy p : {SchedulePolicy::kFcfs, SchedulePolicy::kLpm})
    if (schedule_policy_name(p) == name) return p;
  return invalid_argument("schedule_policy '" + std::string(name) + "' is not one of fcfs, lpm");
}

struct Scheduler::Active {
  Request request;
  RequestResult result;
  std::vector<TokenId> tokens;    // prompt, then the generated tokens fed back (a retracted request resumes from all of it)
  std::vector<SlotId> slots;      // an L1 slot per token of `tokens`
  std::vector<SlotId> reserved;   // L1 slots allocated for the rest of the prompt (and a decode step's token)
  size_t outputs_left = 0;        // output slots decode will still allocate (committed_outputs_ counts them, clipped)
  size_t cached = 0;              // tokens whose KV was cached (L1 or restored)
  size_t restored_begin = 0, restored_end = 0;
  std::optional<Ticket> load;
  CacheLock lock;
  std::mt19937_64 rng;            // the request's sampling stream, seeded by its SamplingParams
  bool cancel_requested = false;  // finish at the start of the next step
  uint64_t rank = 0;              // arrival order
  size_t overtaken = 0;           // requests that arrived later and were admitted first
  size_t cached_l1_now = 0;       // LPM's key, computed when the queue is ordered
  bool resumed = false;           // retracted once: its next prefill continues its output
  size_t chunk_end = 0;           // a chunked prefill computes tokens [cached, chunk_end) this step
  bool prefill_started = false;   // an earlier chunk of its prompt ran
  // A restore of its prefix failed: its next admission recomputes instead of
  // restoring again, so a tier that keeps failing (a broken rank) cannot send
  // the request back forever.
  bool restore_failed = false;
  StorageTier::PrefetchId prefetch = 0;  // its lookup in storage, while it waits
};

Scheduler::Scheduler(RadixCache& cache, DeviceKvPool& l1, TransferEngine* engine, ModelRunner& runner,
                     SchedulerOptions options)
    : cache_(cache),
      l1_(l1),
      engine_(engine),
      runner_(runner),
      options_(options),
      new_token_ratio_(options.new_token_ratio),
      new_token_ratio_decay_(options.new_token_ratio_decay_steps == 0
                                 ? 0.0
                                 : (options.new_token_ratio - options.min_new_token_ratio) /
                                       static_cast<double>(options.new_token_ratio_decay_steps)) {}

Scheduler::~Scheduler() {
  for (auto& a : running_) release(*a);
  if (chunked_) release(*chunked_);
}

void Scheduler::submit(Request request, double arrival) {
  auto a = std::make_unique<Active>();
  a->result.id = request.id;
  a->result.prompt_tokens = request.prompt.size();
  a->result.arrival = arrival;
  a->rng.seed(request.sampling.seed);
  a->rank = submitted_++;
  a->tokens = request.prompt;
  a->request = std::move(request);
  if (storage_ != nullptr) {
    storage_->poll();  // what earlier prefetches brought is in the tree before this one looks
    a->prefetch = storage_->start_prefetch(std::span(a->tokens).first(usable_prefix(*a)));
  }
  waiting_.push_back(std::move(a));
}

bool Scheduler::cancel(uint64_t id) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->request.id != id) continue;
    Active& a = **it;
    if (storage_ != nullptr) storage_->forget(a.prefetch);
    a.result.finish_reason = FinishReason::kCancelled;
    a.result.request = std::move(a.request);
    finished_.push_back(std::move(a.result));
    waiting_.erase(it);
    return true;
  }
  for (auto& a : running_)
    if (a->request.id == id && !a->cancel_requested) return a->cancel_requested = true;
  if (chunked_ && chunked_->request.id == id && !chunked_->cancel_requested) return chunked_->cancel_requested = true;
  return false;
}

// Frees what a request holds that the tree does not own, and its lock.
void Scheduler::release(Active& a) {
  if (!a.reserved.empty()) HIQ_CHECK(l1_.allocator().free(a.reserved).is_ok());
  a.reserved.clear();
  committed_outputs_ -= clipped(a.outputs_left);
  a.outputs_left = 0;
  a.lock.release();
}

// At most every token but the last comes from the cache: the last is always
// computed, for the logits of the first output token.
// A request that wants its prompt's log-probabilities uses none.
size_t Scheduler::usable_prefix(const Active& a) const {
  if (a.request.prompt_logprobs && !a.resumed) return 0;
  return (a.tokens.size() - 1) / cache_.page_size() * cache_.page_size();
}

void Scheduler::emit(Active& a, ForwardResult& result) {
  a.result.output.push_back(result.next);
  new_tokens_.push_back({a.request.id, result.next, std::move(result.logprobs), std::move(result.prompt_logprobs)});
}

Scheduler::Admission Scheduler::admit(Active& a) {
  const std::vector<TokenId>& prompt = a.tokens;  // a resumed request's outputs so far included
  // Every token but the last output has KV, cached or computed, in an L1 slot.
  const auto produced = static_cast<long>(a.tokens.size() - a.request.prompt.size());
  const auto outputs = static_cast<size_t>(std::max(0L, a.request.max_new_tokens - 1 - produced));
  if (prompt.size() + outputs > l1_.num_slots()) {
    a.result.status = resource_exhausted("request " + std::to_string(a.request.id) + " needs " +
                                         std::to_string(prompt.size() + outputs) + " L1 slots; the pool has " +
                                         std::to_string(l1_.num_slots()));
    return Admission::kRejected;
  }
  const size_t usable = usable_prefix(a);
  // Match only what may be used, so that a prompt cached whole — in L2 too —
  // still has its usable part restored rather than recomputed.
  PrefixMatch m = cache_.match_prefix(std::span(prompt).first(usable));
  a.lock = cache_.lock(m.l1_node);
  // Slots for the rest of the prompt — restored or computed alike — now; for
  // every output token but the last (whose KV is never computed), one per
  // decode step. Those are counted, not held: until decode needs them they
  // keep cached KV. Admission keeps free + reclaimable L1 ≥ new_token_ratio ×
  // the outputs still to come of every running request and this one: at
  // ratio 1 decode never runs out; below, it may, and retracts (decode()). A
  // request that does not fit waits before it changes anything: no eviction,
  // no restore.
  const size_t needed = prompt.size() - m.l1_slots.size();
  const auto expected_outputs = static_cast<size_t>(
      std::ceil(new_token_ratio_ * static_cast<double>(clipped(outputs) + committed_outputs_)));
  const size_t free = l1_.allocator().free_count();  // the tree is walked only when the free slots fall short
  if (free < needed + expected_outputs && free + cache_.reclaimable_l1_tokens() < needed + expected_outputs) {
    a.lock.release();
    return Admission::kWait;
  }
  a.slots = m.l1_slots;
  a.load.reset();
  a.restored_begin = a.restored_end = a.slots.size();
  if (m.host_tokens > 0 && m.l1_slots.size() + m.host_tokens <= usable && engine_ != nullptr && !a.restore_failed) {
    auto back = cache_.load_back(m);
    if (back.is_ok()) {
      a.lock = cache_.lock(back->node);
      a.load = back->ticket;
      a.slots.insert(a.slots.end(), back->l1_slots.begin(), back->l1_slots.end());
      a.restored_end = a.slots.size();
    }
  }
  a.cached = a.slots.size();
  const size_t rest = needed - (a.cached - m.l1_slots.size());
  if (l1_.allocator().free_count() < rest) cache_.evict_l1(rest - l1_.allocator().free_count());
  auto slots = l1_.allocator().allocate(rest);
  HIQ_DCHECK(slots.is_ok());  // the slots were counted above
  if (!slots) {
    a.lock.release();  // a restore already issued completes into the tree; it is not lost
    a.slots.clear();
    return Admission::kWait;
  }
  a.reserved = std::move(*slots);
  a.outputs_left = outputs;
  committed_outputs_ += clipped(outputs);
  if (!a.resumed) {  // a resumed request's hits are its own KV: not the cache's hit rate
    a.result.cached_l1_tokens = a.restored_begin;
    a.result.cached_l2_tokens = a.restored_end - a.restored_begin;
  }
  return Admission::kAdmitted;
}

size_t Scheduler::chunk_size() const {
  if (options_.chunked_prefill_size == 0) return 0;
  const size_t page = cache_.page_size();
  return std::max(page, options_.chunked_prefill_size / page * page);
}

// Where this step's prefill of `a` ends: its whole prompt, or — when more
// than a chunk is left to compute and it wants no prompt log-probabilities —
// one chunk further, a whole number of pages (the tree then owns every
// computed token). True when the prompt is chunked.
bool Scheduler::set_chunk_end(Active& a) const {
  a.chunk_end = a.tokens.size();
  const size_t chunk = chunk_size();
  if (chunk == 0 || (a.request.prompt_logprobs && !a.resumed) || a.tokens.size() - a.cached <= chunk) return false;
  a.chunk_end = a.cached + chunk;
  return true;
}

// After a prefill: a request whose prompt is done runs; one with chunks left
// is the chunked request.
void Scheduler::place_prefilled(std::vector<std::unique_ptr<Active>>& batch) {
  for (auto& a : batch) {
    if (a->cached < a->tokens.size()) {
      HIQ_DCHECK(chunked_ == nullptr);
      chunked_ = std::move(a);
    } else {
      running_.push_back(std::move(a));
    }
  }
  batch.clear();
}

void Scheduler::charge_eviction_waits(uint64_t wait_tokens_before) {
  if (const uint64_t waited = cache_.stats().l1_eviction_wait_tokens - wait_tokens_before; waited > 0)
    runner_.waited_for_transfers(waited);
}

void Scheduler::order_waiting() {
  if (options_.policy == SchedulePolicy::kFcfs || waiting_.size() < 2) return;
  // Matching costs a walk of the prompt: only the kLpmWindow oldest requests
  // are matched each step (SGLang falls back to FCFS past 128 waiting); the
  // others rank as if nothing were cached, by arrival.
  uint64_t newest_matched = std::numeric_limits<uint64_t>::max();
  if (waiting_.size() > kLpmWindow) {
    std::vector<uint64_t> ranks;
    ranks.reserve(waiting_.size());
    for (const auto& a : waiting_) ranks.push_back(a->rank);
    std::nth_element(ranks.begin(), ranks.begin() + (kLpmWindow - 1), ranks.end());
    newest_matched = ranks[kLpmWindow - 1];
  }
  for (auto& a : waiting_)
    a->cached_l1_now =
        a->rank <= newest_matched ? cache_.cached_prefix(std::span(a->tokens).first(usable_prefix(*a))).l1 : 0;
  const auto starving = [&](const Active& a) { return a.overtaken >= options_.max_overtakes; };
  std::sort(waiting_.begin(), waiting_.end(), [&](const auto& x, const auto& y) {
    if (starving(*x) != starving(*y)) return starving(*x);
    if (!starving(*x) && x->cached_l1_now != y->cached_l1_now) return x->cached_l1_now > y->cached_l1_now;
    return x->rank < y->rank;
  });
}

Status Scheduler::prefill(std::vector<std::unique_ptr<Active>>& batch) {
  std::vector<ForwardItem> items;
  for (auto& a : batch) {
    const size_t fresh = a->chunk_end - a->cached;
    a->slots.insert(a->slots.end(), a->reserved.begin(), a->reserved.begin() + static_cast<std::ptrdiff_t>(fresh));
    a->reserved.erase(a->reserved.begin(), a->reserved.begin() + static_cast<std::ptrdiff_t>(fresh));
    const std::span<const TokenId> tokens = std::span(a->tokens).first(a->chunk_end);
    if (a->chunk_end < a->tokens.size()) {
      // Not the last chunk: its next token is not wanted (greedy, from no
      // request's random stream, and dropped).
      items.push_back({tokens, a->slots, a->cached, a->restored_begin, a->restored_end, a->load, /*decode=*/false,
                       nullptr, nullptr, -1, false});
      continue;
    }
    items.push_back({tokens, a->slots, a->cached, a->restored_begin, a->restored_end, a->load,
                     /*decode=*/false, sampling_of(a->request), &a->rng, a->request.logprobs,
                     a->request.prompt_logprobs && !a->resumed});
  }
  const double start = runner_.now();
  auto next = runner_.forward(items);
  const double now = runner_.now();
  ++stats_.prefill_steps;
  stats_.prefill_seconds += now - start;
  if (!next) {
    // A restore that failed is recomputed: the whole batch goes back to the
    // queue (its fresh slots freed; the tree settles the failed restore).
    // Another failure is returned, or, for a server, fails the batch.
    bool restore_failed = false;
    for (auto& a : batch)
      if (a->load && engine_ && !engine_->wait(*a->load).is_ok()) restore_failed = a->restore_failed = true;
    if (!restore_failed && !options_.fail_requests_on_model_error) return next.status();
    for (auto it = batch.rbegin(); it != batch.rend(); ++it) {
      Active& a = **it;
      std::vector<SlotId> fresh(a.slots.begin() + static_cast<std::ptrdiff_t>(a.cached), a.slots.end());
      HIQ_CHECK(l1_.allocator().free(fresh).is_ok());
      release(a);
      a.slots.clear();
      a.chunk_end = 0;
      if (restore_failed) {
        waiting_.push_front(std::move(*it));
      } else {
        a.result.status = next.status();
        a.result.finish_reason = FinishReason::kError;
        a.result.request = std::move(a.request);
        finished_.push_back(std::move(a.result));
      }
    }
    batch.clear();
    return Status::ok();
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    Active& a = *batch[i];
    if (!a.resumed && !a.prefill_started) {
      a.result.admitted = start;
      ++stats_.admitted;
      stats_.queue_seconds += start - a.result.arrival;
    }
    a.prefill_started = true;
    const bool last_chunk = a.chunk_end == a.tokens.size();
    if (last_chunk) {
      if (!a.resumed) a.result.first_token = now;
      emit(a, (*next)[i]);
    } else {
      ++stats_.prefill_chunks;
    }
    // The tree takes the prompt's whole pages; from now on read them through it.
    RadixNode* node = cache_.insert(std::span(a.tokens).first(a.chunk_end), a.slots);
    a.lock = cache_.lock(node);
    const std::vector<SlotId> canonical = cache_.l1_slots_to(node);
    HIQ_CHECK(canonical.size() <= a.slots.size());
    std::copy(canonical.begin(), canonical.end(), a.slots.begin());
    a.load.reset();
    a.restored_begin = a.restored_end = 0;
    a.cached = a.chunk_end;
    a.chunk_end = 0;
  }
  return Status::ok();
}

Status Scheduler::decode() {
  // One slot per request for the KV of its last token, evicting cached KV
  // (waiting for a backup if it must). Admission counted new_token_ratio of
  // them; when that proves too few, requests are retracted until the rest fit.
  std::optional<std::vector<SlotId>> step_slots;
  while (!running_.empty()) {
    const size_t n = running_.size();
    if (l1_.allocator().free_count() < n) {
      const uint64_t waited_before = cache_.stats().l1_eviction_wait_tokens;
      cache_.evict_l1(n - l1_.allocator().free_count());
      charge_eviction_waits(waited_before);
    }
    if (auto slots = l1_.allocator().allocate(n)) {
      step_slots = std::move(*slots);
      break;
    }
    retract_one();
  }
  if (running_.empty()) return Status::ok();
  new_token_ratio_ = std::max(options_.min_new_token_ratio, new_token_ratio_ - new_token_ratio_decay_);
  const size_t n = running_.size();
  std::vector<ForwardItem> items;
  for (size_t i = 0; i < n; ++i) {
    Active* a = running_[i].get();
    HIQ_DCHECK(a->outputs_left > 0);
    committed_outputs_ -= clipped(a->outputs_left) - clipped(a->outputs_left - 1);
    --a->outputs_left;
    a->tokens.push_back(a->result.output.back());
    a->slots.push_back((*step_slots)[i]);
    items.push_back({a->tokens, a->slots, a->tokens.size() - 1, 0, 0, std::nullopt, /*decode=*/true,
                     sampling_of(a->request), &a->rng, a->request.logprobs, /*prompt_logprobs=*/false});
  }
  const double start = runner_.now();
  auto next = runner_.forward(items);
  ++stats_.decode_steps;
  stats_.decode_seconds += runner_.now() - start;
  if (!next) {
    if (!options_.fail_requests_on_model_error) return next.status();
    // The step's token has no valid KV: give its slot back, then finish each
    // request with what it has (whose KV is valid) and the error.
    for (auto& a : running_) {
      a->reserved.insert(a->reserved.begin(), a->slots.back());
      a->slots.pop_back();
      a->tokens.pop_back();
      a->result.status = next.status();
      finish(*a, FinishReason::kError);
    }
    running_.clear();
    return Status::ok();
  }
  for (size_t i = 0; i < running_.size(); ++i) {
    emit(*running_[i], (*next)[i]);
  }
  return Status::ok();
}

// The running request that has made the least progress (fewest outputs; of
// those, the longest sequence, which frees the most) goes back to the queue.
// Its KV goes to the tree like a finished request's, so it resumes from the
// cache. Admission then counts every output (ratio 1) until the ratio has
// decayed again: no request is retracted twice in a row by the same estimate.
void Scheduler::retract_one() {
  const auto victim = std::min_element(running_.begin(), running_.end(), [](const auto& x, const auto& y) {
    if (x->result.output.size() != y->result.output.size()) return x->result.output.size() < y->result.output.size();
    return x->tokens.size() > y->tokens.size();
  });
  Active& a = **victim;
  hand_kv_to_cache(a);
  a.slots.clear();
  a.tokens.push_back(a.result.output.back());  // its next prefill computes this token's KV and samples the next
  a.cached = 0;
  a.resumed = true;
  ++stats_.retractions;
  waiting_.push_front(std::move(*victim));
  running_.erase(victim);
  new_token_ratio_ = 1.0;
}

// The tokens whose KV exists (one per slot: the prompt and every output but
// the last, or, between chunks of a prefill, the part computed) go into the
// tree; the slots of a trailing partial page are freed, and what the request
// held is released.
void Scheduler::hand_kv_to_cache(Active& a) {
  (void)cache_.insert(std::span(a.tokens).first(a.slots.size()), a.slots);
  const size_t whole = a.slots.size() / cache_.page_size() * cache_.page_size();
  HIQ_CHECK(l1_.allocator().free(std::span(a.slots).subspan(whole)).is_ok());
  release(a);
}

void Scheduler::finish(Active& a, FinishReason reason) {
  a.result.finish_reason = reason;
  a.result.finish = runner_.now();
  hand_kv_to_cache(a);
  a.result.request = std::move(a.request);
  finished_.push_back(std::move(a.result));
}

Result<bool> Scheduler::step() {
  if (storage_ != nullptr) storage_->poll();
  // Finish requests that were cancelled, generated a stop token, or have all their tokens.
  for (auto it = running_.begin(); it != running_.end();) {
    Active& a = **it;
    const std::vector<TokenId>& stops = a.request.stop_token_ids;
    std::optional<FinishReason> reason;
    if (a.cancel_requested) reason = FinishReason::kCancelled;
    else if (!a.result.output.empty() && std::find(stops.begin(), stops.end(), a.result.output.back()) != stops.end())
      reason = FinishReason::kStop;
    else if (static_cast<int>(a.result.output.size()) >= a.request.max_new_tokens) reason = FinishReason::kLength;
    if (reason) {
      finish(a, *reason);
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  if (chunked_ && chunked_->cancel_requested) {
    finish(*chunked_, FinishReason::kCancelled);
    chunked_.reset();
  }
  // A prompt prefilled in chunks: each chunk (its last too) is followed by a
  // decode step of the running requests, so that it does not stall them, and
  // nothing else is admitted until its last chunk.
  if (last_step_was_chunk_ && !running_.empty()) {
    last_step_was_chunk_ = false;
    HIQ_RETURN_IF_ERROR(decode());
    cache_.poll_transfers();
    return busy();
  }
  last_step_was_chunk_ = false;
  if (chunked_) {
    last_step_was_chunk_ = true;
    set_chunk_end(*chunked_);
    std::vector<std::unique_ptr<Active>> batch;
    batch.push_back(std::move(chunked_));
    HIQ_RETURN_IF_ERROR(prefill(batch));
    place_prefilled(batch);
    cache_.poll_transfers();
    return busy();
  }
  // Admit what fits the prefill budget, in the policy's order. The budget counts
  // the tokens a prefill computes; what the cache holds costs nothing. A
  // request that would compute at least `in_batch_prefix_tokens` of the same
  // prefix as one already in this batch waits one step (SGLang's in-batch
  // prefix check): next step it finds that prefix in the tree instead of
  // computing it twice. A prefix the cache already holds is shared within a
  // batch, so the requests reusing it are not deferred.
  std::vector<std::unique_ptr<Active>> batch;
  size_t budget = options_.max_prefill_tokens;
  const auto computes_prefix_of_batch = [&](const Active& a, size_t cached) {
    const std::vector<TokenId>& x = a.tokens;
    for (const auto& b : batch) {
      const std::vector<TokenId>& y = b->tokens;
      const size_t n = std::min(x.size(), y.size());
      const auto common = static_cast<size_t>(std::mismatch(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n),
                                                            y.begin()).first - x.begin());
      if (common >= cached + options_.in_batch_prefix_tokens) return true;
    }
    return false;
  };
  order_waiting();
  const uint64_t waited_before = cache_.stats().l1_eviction_wait_tokens;
  bool waits_for_storage = false;  // a request was passed over for its prefetch
  for (auto it = waiting_.begin();
       it != waiting_.end() && running_.size() + batch.size() < options_.max_running_requests;) {
    Active& a = **it;
    if (!batch.empty()) {  // the first request is always admitted; the others must fit beside it
      const std::vector<TokenId>& prompt = a.tokens;
      const size_t cached = cache_.cached_prefix(std::span(prompt).first(usable_prefix(a))).total();
      if (prompt.size() - cached > budget) break;
      if (chunk_size() > 0 && prompt.size() - cached > chunk_size()) break;  // chunked: first of a step, alone
      if (options_.in_batch_prefix_tokens > 0 && computes_prefix_of_batch(a, cached)) {
        ++it;  // deferred to the next step
        continue;
      }
    }
    if (storage_ != nullptr && a.prefetch != 0 &&
        storage_->should_wait(a.prefetch, a.result.arrival, runner_.now())) {
      waits_for_storage = true;
      ++it;  // its prefetch is still on the way: the next ones may go first
      continue;
    }
    const Admission admission = admit(a);
    if (admission == Admission::kWait) {
      ++stats_.admission_waits;
      break;
    }
    if (storage_ != nullptr && a.prefetch != 0) {
      if (admission == Admission::kAdmitted && !a.resumed)
        a.result.cached_storage_tokens = std::min(storage_->inserted_tokens(a.prefetch), a.result.cached_l2_tokens);
      storage_->forget(a.prefetch);
      a.prefetch = 0;
    }
    std::unique_ptr<Active> owned = std::move(*it);
    it = waiting_.erase(it);
    if (admission == Admission::kRejected) {
      owned->result.finish_reason = FinishReason::kError;
      owned->result.request = std::move(owned->request);
      finished_.push_back(std::move(owned->result));
      continue;
    }
    budget -= std::min(budget, owned->tokens.size() - owned->cached);
    const bool chunked = set_chunk_end(*owned);
    batch.push_back(std::move(owned));
    if (chunked) break;  // the first request of the step, and its only one
  }
  charge_eviction_waits(waited_before);
  for (auto& w : waiting_)
    for (const auto& a : batch) w->overtaken += a->rank > w->rank ? 1 : 0;
  if (!batch.empty()) {
    HIQ_RETURN_IF_ERROR(prefill(batch));
    place_prefilled(batch);
    last_step_was_chunk_ = chunked_ != nullptr;
  } else if (!running_.empty()) {
    HIQ_RETURN_IF_ERROR(decode());
  } else if (waits_for_storage) {
    ++stats_.storage_waits;
    storage_->wait_for_progress(0.01);  // the queue waits for storage: let it make progress
  } else if (!waiting_.empty() && cache_.transfers_in_flight() > 0) {
    ++stats_.transfer_drains;
    cache_.drain_transfers();  // KV under backup cannot be evicted yet: wait for it, then retry
  } else if (!waiting_.empty()) {
    // Nothing runs, nothing is in flight, and the head of the queue does not
    // fit although admit() evicted all it could: it never will.
    auto a = std::move(waiting_.front());
    waiting_.pop_front();
    a->result.status = resource_exhausted("request " + std::to_string(a->request.id) +
                                          " does not fit in L1 even with everything else evicted");
    a->result.finish_reason = FinishReason::kError;
    a->result.request = std::move(a->request);
    finished_.push_back(std::move(a->result));
  }
  cache_.poll_transfers();
  return busy();
}

std::vector<RequestResult> Scheduler::take_finished() { return std::exchange(finished_, {}); }

std::vector<GeneratedToken> Scheduler::take_new_tokens() { return std::exchange(new_tokens_, {}); }

}  // namespace hiq
