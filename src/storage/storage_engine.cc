#include "storage/storage_engine.h"

#include <algorithm>
#include <chrono>

#include "core/log.h"
#include "storage/storage_value.h"

namespace hiq {

StorageEngine::StorageEngine(std::unique_ptr<StorageBackend> backend, int threads) : backend_(std::move(backend)) {
  HIQ_CHECK_MSG(backend_ != nullptr, "StorageEngine needs a backend");
  HIQ_CHECK_MSG(threads >= 0, "StorageEngine: a negative thread count");
  max_running_writes_ = threads > 1 ? static_cast<size_t>(threads - 1) : 1;
  workers_.reserve(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
}

StorageEngine::~StorageEngine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    reads_.clear();
    writes_.clear();
  }
  work_ready_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

StorageEngine::Ticket StorageEngine::submit_exists(std::vector<StorageKey> keys) {
  Operation operation;
  operation.op = StorageOp::kExists;
  operation.keys = std::move(keys);
  return submit(std::move(operation));
}

StorageEngine::Ticket StorageEngine::submit_get(std::vector<StorageKey> keys, StorageFingerprint fp,
                                                size_t payload_bytes, PageSink sink) {
  Operation operation;
  operation.op = StorageOp::kGet;
  operation.keys = std::move(keys);
  operation.fp = std::move(fp);
  operation.payload_bytes = payload_bytes;
  operation.sink = std::move(sink);
  return submit(std::move(operation));
}

StorageEngine::Ticket StorageEngine::submit_set(std::vector<StorageKey> keys, StorageFingerprint fp,
                                                size_t payload_bytes, PageSource source, bool skip_stored) {
  Operation operation;
  operation.op = StorageOp::kSet;
  operation.keys = std::move(keys);
  operation.fp = std::move(fp);
  operation.payload_bytes = payload_bytes;
  operation.source = std::move(source);
  operation.skip_stored = skip_stored;
  return submit(std::move(operation));
}

StorageEngine::Ticket StorageEngine::submit_set(std::vector<StorageKey> keys,
                                                std::vector<std::vector<std::byte>> values, bool skip_stored) {
  Operation operation;
  operation.op = StorageOp::kSet;
  operation.keys = std::move(keys);
  operation.values = std::move(values);
  operation.skip_stored = skip_stored;
  return submit(std::move(operation));
}

StorageEngine::Ticket StorageEngine::submit(Operation operation) {
  Ticket ticket;
  {
    std::lock_guard lock(mutex_);
    ticket = next_ticket_++;
    operation.ticket = ticket;
    outstanding_.insert(ticket);
    if (!workers_.empty()) (operation.op == StorageOp::kSet ? writes_ : reads_).push_back(std::move(operation));
  }
  if (workers_.empty()) {  // inline
    Completion completion = run(operation);
    std::lock_guard lock(mutex_);
    done_.push_back(std::move(completion));
    return ticket;
  }
  work_ready_.notify_one();
  return ticket;
}

std::vector<StorageEngine::Completion> StorageEngine::poll() {
  std::lock_guard lock(mutex_);
  std::vector<Completion> out;
  out.reserve(done_.size());
  for (Completion& c : done_) {
    outstanding_.erase(c.ticket);
    out.push_back(std::move(c));
  }
  done_.clear();
  return out;
}

StorageEngine::Completion StorageEngine::wait(Ticket ticket) {
  std::unique_lock lock(mutex_);
  if (!outstanding_.contains(ticket)) {
    Completion c;
    c.ticket = ticket;
    c.status = failed_precondition("storage ticket " + std::to_string(ticket) + " is unknown or already collected");
    return c;
  }
  for (;;) {
    const auto it = std::find_if(done_.begin(), done_.end(), [&](const Completion& c) { return c.ticket == ticket; });
    if (it != done_.end()) {
      Completion c = std::move(*it);
      done_.erase(it);
      outstanding_.erase(ticket);
      return c;
    }
    finished_.wait(lock);
  }
}

bool StorageEngine::wait_for_completion(double seconds) {
  std::unique_lock lock(mutex_);
  return finished_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return !done_.empty(); });
}

void StorageEngine::drain() {
  std::unique_lock lock(mutex_);
  finished_.wait(lock, [&] { return reads_.empty() && writes_.empty() && running_ == 0; });
}

size_t StorageEngine::outstanding() const {
  std::lock_guard lock(mutex_);
  return outstanding_.size();
}

StorageStats StorageEngine::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void StorageEngine::work() {
  for (;;) {
    Operation operation;
    {
      std::unique_lock lock(mutex_);
      const auto write_may_start = [&] { return !writes_.empty() && running_writes_ < max_running_writes_; };
      work_ready_.wait(lock, [&] { return stopping_ || !reads_.empty() || write_may_start(); });
      if (stopping_) return;
      std::deque<Operation>& queue = !reads_.empty() ? reads_ : writes_;
      operation = std::move(queue.front());
      queue.pop_front();
      ++running_;
      if (operation.op == StorageOp::kSet) ++running_writes_;
    }
    Completion completion = run(operation);
    {
      std::lock_guard lock(mutex_);
      --running_;
      if (operation.op == StorageOp::kSet) --running_writes_;
      done_.push_back(std::move(completion));
    }
    finished_.notify_all();
    work_ready_.notify_all();  // a write may start now that one finished
  }
}

StorageEngine::Completion StorageEngine::run(Operation& operation) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  Completion c;
  c.ticket = operation.ticket;
  c.op = operation.op;
  const size_t keys = operation.keys.size();
  uint64_t bytes = 0, corrupt = 0, skipped = 0;

  switch (operation.op) {
    case StorageOp::kExists: {
      auto held = backend_->exists(operation.keys);
      if (held.is_ok()) c.hits = std::min(*held, keys);
      else c.status = held.status();
      break;
    }
    case StorageOp::kGet: {
      // Each value is checked where the backend hands it over; the first
      // missing or unusable one ends the run (and the read).
      std::vector<StorageKey> unusable;
      c.status = backend_->read(operation.keys, [&](size_t i, std::span<const std::byte> value) {
        bytes += value.size();
        if (value.empty()) return false;
        const auto payload = decode_value(value, operation.fp, operation.keys[i], operation.payload_bytes);
        if (!payload.is_ok()) {
          ++corrupt;
          unusable.push_back(operation.keys[i]);
          log(LogLevel::kWarning, "storage",
              std::string(backend_->name()) + " storage: dropping an unusable value: " + payload.status().to_string());
          return false;
        }
        if (operation.sink) operation.sink(i, *payload);
        else c.payloads.emplace_back(payload->begin(), payload->end());
        c.hits = i + 1;
        return true;
      });
      if (!c.status.is_ok()) {
        c.hits = 0;
        c.payloads.clear();
      }
      if (!unusable.empty()) {
        if (Status removed = backend_->remove(unusable); !removed.is_ok())
          log(LogLevel::kWarning, "storage", "cannot remove an unusable value: " + removed.to_string());
        c.removed = std::move(unusable);
      }
      break;
    }
    case StorageOp::kSet: {
      size_t stored = 0;  // the run of keys from the first that storage holds already
      if (operation.skip_stored) {
        auto held = backend_->exists(operation.keys);
        if (held.is_ok()) stored = std::min(*held, keys);  // on an error, write them all
      }
      skipped = stored;
      if (operation.source) {  // the pages are gathered here, straight into their values
        operation.values.resize(keys);
        for (size_t i = stored; i < keys; ++i) {
          std::vector<std::byte>& value = operation.values[i];
          value.resize(kStorageHeaderBytes + operation.payload_bytes);
          operation.source(i, std::span<std::byte>(value).subspan(kStorageHeaderBytes));
          seal_value(value, operation.fp, operation.keys[i]);
        }
      }
      if (operation.keys.size() != operation.values.size()) {
        c.status = invalid_argument("storage set: " + std::to_string(operation.keys.size()) + " keys but " +
                                    std::to_string(operation.values.size()) + " values");
        break;
      }
      const auto to_write = std::span<const std::vector<std::byte>>(operation.values).subspan(stored);
      for (const auto& value : to_write) bytes += value.size();
      if (!to_write.empty()) c.status = backend_->set(std::span(operation.keys).subspan(stored), to_write);
      if (c.status.is_ok()) c.hits = keys;
      break;
    }
  }

  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::lock_guard lock(mutex_);
  StorageStats& s = stats_;
  const uint64_t failed = c.status.is_ok() ? 0 : 1;
  switch (operation.op) {
    case StorageOp::kExists:
      ++s.exists_calls;
      s.exists_errors += failed;
      s.exists_hit_blocks += c.hits;
      s.exists_miss_blocks += keys - c.hits;
      s.exists_seconds += seconds;
      break;
    case StorageOp::kGet:
      ++s.get_calls;
      s.get_errors += failed;
      s.hit_blocks += c.hits;
      s.miss_blocks += keys - c.hits;
      s.corrupt_values += corrupt;
      s.bytes_read += bytes;
      s.get_seconds += seconds;
      break;
    case StorageOp::kSet:
      ++s.set_calls;
      s.set_errors += failed;
      s.set_blocks += c.hits;
      if (c.status.is_ok()) s.set_skipped_blocks += skipped;
      if (c.status.is_ok()) s.bytes_written += bytes;
      s.set_seconds += seconds;
      break;
  }
  return c;
}

}  // namespace hiq
