#include "engine/serving_engine.h"

#include <utility>

#include "core/log.h"

namespace hiq {

std::optional<GenerationEvent> GenerationStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  GenerationEvent event = std::move(events_.front());
  events_.pop_front();
  return event;
}

void GenerationStream::push(GenerationEvent event) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_one();
}

namespace {
SchedulerOptions serving_options(SchedulerOptions o) {
  o.fail_requests_on_model_error = true;  // a server survives a failed batch
  return o;
}
// How long the idle engine thread sleeps before it polls the transfers again.
constexpr auto kIdlePoll = std::chrono::milliseconds(20);
}  // namespace

ServingEngine::ServingEngine(RadixCache& cache, DeviceKvPool& l1, TransferEngine* engine, ModelRunner& runner,
                             SchedulerOptions options, const HostKvPool* l2, StorageTier* storage)
    : cache_(cache),
      l1_(l1),
      l2_(l2),
      transfer_(engine),
      runner_(runner),
      options_(options),
      scheduler_(cache, l1, engine, runner, serving_options(options)),
      storage_(storage) {
  scheduler_.set_storage(storage);
  stats_.storage = storage != nullptr;
  stats_.l1_free_slots = l1_.allocator().free_count();
  thread_ = std::thread([this] { loop(); });
}

ServingEngine::~ServingEngine() { stop(); }

void ServingEngine::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Result<std::shared_ptr<GenerationStream>> ServingEngine::submit(Request request) {
  std::vector<Request> one;
  one.push_back(std::move(request));
  return submit(std::move(one));
}

Result<std::shared_ptr<GenerationStream>> ServingEngine::submit(std::vector<Request> choices) {
  if (choices.empty()) return invalid_argument("no request to submit");
  for (const Request& request : choices) {
    if (request.prompt.empty()) return invalid_argument("the prompt is empty");
    if (request.max_new_tokens < 1) return invalid_argument("max_tokens must be at least 1");
    if (request.logprobs < -1 || request.logprobs > kMaxTopLogprobs)
      return invalid_argument("logprobs must be in [0, " + std::to_string(kMaxTopLogprobs) + "]");
    HIQ_RETURN_IF_ERROR(request.sampling.validate());
  }
  // More choices than the queue can ever hold: no retry can help.
  const size_t bound = options_.max_queued_requests;
  if (bound > 0 && choices.size() > bound)
    return invalid_argument("parameter 'n': " + std::to_string(choices.size()) +
                            " choices are more than the queue holds (--max-queued-requests " + std::to_string(bound) + ")");
  std::shared_ptr<GenerationStream> stream;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return unavailable("the server is shutting down");
    // The queue: what waits for admission, and what the engine thread has not taken yet.
    const size_t queued = stats_.waiting + submissions_.size() + in_transit_;
    if (bound > 0 && queued + choices.size() > bound) {
      ++stats_.rejected_queue_full;
      return resource_exhausted("the queue is full (" + std::to_string(queued) + " requests waiting, the bound is " +
                                std::to_string(bound) + "); retry later");
    }
    std::vector<uint64_t> ids;
    for (Request& request : choices) ids.push_back(request.id = next_id_++);
    stream = std::make_shared<GenerationStream>(std::move(ids));
    for (size_t i = 0; i < choices.size(); ++i) {
      streams_.emplace(choices[i].id, Reader{stream, i});
      ++stats_.submitted;
      submissions_.push_back(std::move(choices[i]));
    }
  }
  wake_.notify_all();
  return stream;
}

void ServingEngine::cancel(uint64_t id) {
  {
    std::lock_guard lock(mutex_);
    cancellations_.push_back(id);
  }
  wake_.notify_all();
}

void ServingEngine::cancel(const GenerationStream& stream) {
  {
    std::lock_guard lock(mutex_);
    cancellations_.insert(cancellations_.end(), stream.ids().begin(), stream.ids().end());
  }
  wake_.notify_all();
}

Status ServingEngine::flush_cache() {
  std::unique_lock lock(mutex_);
  if (stopping_) return unavailable("the server is shutting down");
  FlushWaiter waiter;
  flush_waiters_.push_back(&waiter);
  wake_.notify_all();
  flushed_.wait(lock, [&] { return waiter.result.has_value(); });
  return *waiter.result;
}

bool ServingEngine::stopping() const {
  std::lock_guard lock(mutex_);
  return stopping_;
}

ServingStats ServingEngine::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

// Hands the tokens and finished requests of the last step to their streams,
// and refreshes the stats. Engine thread only.
void ServingEngine::dispatch() {
  std::vector<GeneratedToken> tokens = scheduler_.take_new_tokens();
  std::vector<RequestResult> finished = scheduler_.take_finished();
  std::lock_guard lock(mutex_);
  for (GeneratedToken& t : tokens) {
    ++stats_.generated_tokens;
    const auto it = streams_.find(t.request);
    if (it == streams_.end()) continue;
    GenerationEvent event;
    event.choice = it->second.choice;
    event.token = t.token;
    event.logprobs = std::move(t.logprobs);
    event.prompt_logprobs = std::move(t.prompt_logprobs);
    it->second.stream->push(std::move(event));
  }
  for (RequestResult& r : finished) {
    if (const auto failure = step_failures_.find(r.id); failure != step_failures_.end()) {
      r.finish_reason = FinishReason::kError;
      r.status = failure->second;
      step_failures_.erase(failure);
    }
    if (r.finish_reason == FinishReason::kError)  // a request L1 cannot hold is the client's; a failed step is ours
      log(r.status.code() == StatusCode::kResourceExhausted ? LogLevel::kWarning : LogLevel::kError, "engine",
          "request " + std::to_string(r.id) + " failed: " + r.status.to_string());
    ++stats_.finished;
    if (r.finish_reason == FinishReason::kError) ++stats_.failed;
    if (r.finish_reason == FinishReason::kCancelled) ++stats_.cancelled;
    stats_.prompt_tokens += r.prompt_tokens;
    stats_.cached_l1_tokens += r.cached_l1_tokens;
    stats_.cached_l2_tokens += r.cached_l2_tokens;
    stats_.cached_storage_tokens += r.cached_storage_tokens;
    const auto it = streams_.find(r.id);
    if (it == streams_.end()) continue;
    GenerationEvent event;
    event.kind = GenerationEvent::Kind::kFinished;
    event.choice = it->second.choice;
    event.result = std::move(r);
    it->second.stream->push(std::move(event));
    streams_.erase(it);
  }
  stats_.cache = cache_.stats();
  stats_.waiting = scheduler_.waiting();
  stats_.running = scheduler_.running();
  stats_.scheduler = scheduler_.stats();
  stats_.l1_free_slots = l1_.allocator().free_count();
  if (l2_ != nullptr) stats_.l2_used_tokens = l2_->used_tokens();
  if (transfer_ != nullptr) stats_.transfer = transfer_->stats();
  if (storage_ != nullptr) stats_.storage_tier = storage_->stats();
}

void ServingEngine::loop() {
  while (true) {
    std::vector<Request> submissions;
    std::vector<uint64_t> cancellations;
    std::vector<FlushWaiter*> flushes;
    bool stopping = false;
    {
      std::unique_lock lock(mutex_);
      const bool idle = scheduler_.waiting() == 0 && scheduler_.running() == 0;
      if (idle && submissions_.empty() && cancellations_.empty() && flush_waiters_.empty() && !stopping_)
        wake_.wait_for(lock, kIdlePoll);
      submissions.swap(submissions_);
      in_transit_ = submissions.size();
      cancellations.swap(cancellations_);
      flushes.swap(flush_waiters_);
      stopping = stopping_;
    }
    for (Request& r : submissions) scheduler_.submit(std::move(r), runner_.now());
    if (!submissions.empty()) {  // the queue bound counts them as waiting from now on
      std::lock_guard lock(mutex_);
      stats_.waiting = scheduler_.waiting();
      in_transit_ = 0;
    }
    for (uint64_t id : cancellations) (void)scheduler_.cancel(id);
    if (stopping) {
      // Cancel what is left, let the scheduler finish it, and leave. Nothing
      // new goes to L2: a process that is going away has no use for it.
      cache_.stop_backups();
      std::vector<uint64_t> ids;
      {
        std::lock_guard lock(mutex_);
        for (const auto& [id, reader] : streams_) ids.push_back(id);
      }
      for (uint64_t id : ids) (void)scheduler_.cancel(id);
      while (scheduler_.running() > 0 || scheduler_.waiting() > 0) {
        if (!scheduler_.step().is_ok()) break;
        dispatch();
      }
      dispatch();
      cache_.drain_transfers();
      std::lock_guard lock(mutex_);
      // Nothing more is taken from now on: answer every flush still waiting.
      flushes.insert(flushes.end(), flush_waiters_.begin(), flush_waiters_.end());
      flush_waiters_.clear();
      for (FlushWaiter* waiter : flushes) waiter->result = unavailable("the server is shutting down");
      for (auto& [id, reader] : streams_) {  // anything the scheduler could not finish
        GenerationEvent event;
        event.kind = GenerationEvent::Kind::kFinished;
        event.choice = reader.choice;
        event.result.id = id;
        event.result.finish_reason = FinishReason::kCancelled;
        reader.stream->push(std::move(event));
      }
      streams_.clear();
      flushed_.notify_all();
      return;
    }
    if (scheduler_.waiting() > 0 || scheduler_.running() > 0) {
      const Result<bool> stepped = scheduler_.step();
      if (!stepped.is_ok()) {
        // With fail_requests_on_model_error the scheduler only returns
        // errors for broken invariants: fail every request (with the reason)
        // rather than die.
        log(LogLevel::kError, "engine", "step failed, failing every request: " + stepped.status().to_string());
        std::vector<uint64_t> ids;
        {
          std::lock_guard lock(mutex_);
          for (const auto& [id, reader] : streams_) ids.push_back(id);
        }
        for (uint64_t id : ids) {
          (void)scheduler_.cancel(id);
          step_failures_[id] = stepped.status();
        }
      }
    } else {
      cache_.poll_transfers();
      if (storage_ != nullptr) storage_->poll();  // writes to storage finish (and unpin) while idle too
    }
    dispatch();
    if (!flushes.empty()) {
      Status result = Status::ok();
      if (scheduler_.waiting() > 0 || scheduler_.running() > 0) {
        result = failed_precondition("requests are running; flush the cache when the server is idle");
      } else {
        cache_.drain_transfers();
        cache_.clear();
      }
      std::lock_guard lock(mutex_);
      for (FlushWaiter* waiter : flushes) waiter->result = result;
      stats_.cache = cache_.stats();
      stats_.l1_free_slots = l1_.allocator().free_count();
      if (l2_ != nullptr) stats_.l2_used_tokens = l2_->used_tokens();
      flushed_.notify_all();
    }
  }
}

}  // namespace hiq
