// StorageEngine: every ticket completes exactly once (poll or wait) under
// concurrent submitters; a get returns validated payloads for the run of hits
// and stops at the first miss or bad value; failures of the backend are
// counted and never block; destruction with work queued ends.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <map>
#include <set>
#include <thread>
#include <unordered_set>

#include "storage/storage_backend.h"
#include "storage/storage_engine.h"
#include "storage/storage_value.h"
#include "storage_test_util.h"

namespace hiq {
namespace {

using testing::encoded_pages;
using testing::payload;
using testing::prompt;
using testing::small_fingerprint;

constexpr size_t kPage = 768;

std::unique_ptr<StorageBackend> memory(size_t bytes = 64 << 20) { return std::move(*make_memory_backend(bytes)); }

TEST(StorageEngine, GetReturnsThePayloadsOfTheRunOfHits) {
  const StorageFingerprint fp = small_fingerprint();
  const auto keys = storage_keys(fp, prompt(20, 1));  // 5 blocks
  StorageEngine engine(memory(), 2);
  const auto set = engine.wait(engine.submit_set({keys[0], keys[1], keys[2], keys[4]},
                                                 encoded_pages(fp, {keys[0], keys[1], keys[2], keys[4]}, kPage, 10)));
  ASSERT_TRUE(set.status.is_ok()) << set.status.to_string();
  EXPECT_EQ(set.op, StorageOp::kSet);
  EXPECT_EQ(set.hits, 4u);

  const auto exists = engine.wait(engine.submit_exists(keys));
  EXPECT_EQ(exists.op, StorageOp::kExists);
  EXPECT_EQ(exists.hits, 3u);

  const auto got = engine.wait(engine.submit_get(keys, fp, kPage));
  ASSERT_TRUE(got.status.is_ok());
  EXPECT_EQ(got.op, StorageOp::kGet);
  ASSERT_EQ(got.hits, 3u);
  ASSERT_EQ(got.payloads.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(got.payloads[i], payload(kPage, 10 + static_cast<uint32_t>(i)));

  const StorageStats s = engine.stats();
  EXPECT_EQ(s.set_calls, 1u);
  EXPECT_EQ(s.set_blocks, 4u);
  EXPECT_EQ(s.bytes_written, 4 * (kStorageHeaderBytes + kPage));
  EXPECT_EQ(s.exists_calls, 1u);
  EXPECT_EQ(s.exists_hit_blocks, 3u);
  EXPECT_EQ(s.exists_miss_blocks, 2u);
  EXPECT_EQ(s.get_calls, 1u);
  EXPECT_EQ(s.hit_blocks, 3u);
  EXPECT_EQ(s.miss_blocks, 2u);
  EXPECT_EQ(s.bytes_read, 3 * (kStorageHeaderBytes + kPage));  // the read stops at the first miss
  EXPECT_EQ(s.errors(), 0u);
  EXPECT_EQ(s.corrupt_values, 0u);
  EXPECT_GE(s.get_seconds, 0.0);
  EXPECT_EQ(engine.outstanding(), 0u);
}

TEST(StorageEngine, AValueOfAnotherSizeOrKeyIsCountedCorruptAndRemoved) {
  const StorageFingerprint fp = small_fingerprint();
  const auto keys = storage_keys(fp, prompt(12, 2));
  testing::CapturedLog log;
  StorageEngine engine(memory(), 1);
  auto values = encoded_pages(fp, keys, kPage, 20);
  values[1] = encode_value(fp, keys[0], payload(kPage, 99));  // block 0's value under block 1's key
  ASSERT_TRUE(engine.wait(engine.submit_set(keys, values)).status.is_ok());
  auto got = engine.wait(engine.submit_get(keys, fp, kPage));
  EXPECT_EQ(got.hits, 1u);
  EXPECT_EQ(engine.stats().corrupt_values, 1u);
  EXPECT_EQ(engine.wait(engine.submit_exists(keys)).hits, 1u) << "the bad value was removed";

  got = engine.wait(engine.submit_get({keys[0]}, fp, kPage + 16));  // this server expects larger pages
  EXPECT_EQ(got.hits, 0u);
  EXPECT_EQ(engine.stats().corrupt_values, 2u);
  EXPECT_EQ(log.count("storage: memory storage: dropping an unusable value"), 2u);
}

// Pages in place: a set whose source fills payloads on the worker (the
// engine writes the headers), read back through a sink in key order. With no
// threads, each runs inside its submit call.
TEST(StorageEngine, SourcesAndSinksMovePagesInPlaceWithOrWithoutThreads) {
  for (const int threads : {0, 2}) {
    SCOPED_TRACE(threads);
    const StorageFingerprint fp = small_fingerprint();
    const auto keys = storage_keys(fp, prompt(16, 3));  // 4 blocks
    StorageEngine engine(memory(), threads);
    std::vector<size_t> filled;
    std::mutex mutex;  // the source runs on a worker
    const auto set = engine.submit_set(keys, fp, kPage, [&](size_t i, std::span<std::byte> page) {
      const std::vector<std::byte> want = payload(kPage, 40 + static_cast<uint32_t>(i));
      std::copy(want.begin(), want.end(), page.begin());
      std::lock_guard lock(mutex);
      filled.push_back(i);
    });
    if (threads == 0) {
      EXPECT_EQ(filled.size(), keys.size()) << "inline: done within submit";
    }
    const auto stored = engine.wait(set);
    ASSERT_TRUE(stored.status.is_ok()) << stored.status.to_string();
    EXPECT_EQ(stored.hits, 4u);
    // The values are whole: a plain get decodes them.
    auto plain = engine.wait(engine.submit_get({keys[2]}, fp, kPage));
    ASSERT_EQ(plain.payloads.size(), 1u);
    EXPECT_EQ(plain.payloads[0], payload(kPage, 42));

    ASSERT_TRUE(engine.backend().remove(std::span(keys).subspan(3, 1)).is_ok());
    std::vector<std::vector<std::byte>> sunk;
    const auto got = engine.wait(engine.submit_get(keys, fp, kPage, [&](size_t i, std::span<const std::byte> page) {
      EXPECT_EQ(i, sunk.size());  // in key order, one call at a time
      sunk.emplace_back(page.begin(), page.end());
    }));
    EXPECT_EQ(got.hits, 3u);
    EXPECT_TRUE(got.payloads.empty()) << "a sink's pages are not also returned";
    ASSERT_EQ(sunk.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(sunk[i], payload(kPage, 40 + static_cast<uint32_t>(i)));
  }
}

// A backend that fails every call, or blocks each call until released.
class ScriptedBackend : public StorageBackend {
 public:
  std::string_view name() const override { return "scripted"; }
  Result<size_t> exists(std::span<const StorageKey>) override {
    pass();
    return fail_ ? Result<size_t>(unavailable("scripted: down")) : Result<size_t>(size_t{0});
  }
  Status read(std::span<const StorageKey> keys, const ValueVisitor& visit) override {
    pass();
    if (fail_) return unavailable("scripted: down");
    for (size_t i = 0; i < keys.size() && visit(i, {}); ++i) {
    }
    return Status::ok();
  }
  Status set(std::span<const StorageKey>, std::span<const std::vector<std::byte>>) override {
    pass();
    return fail_ ? unavailable("scripted: down") : Status::ok();
  }

  bool fail_ = false;
  void hold() {
    std::lock_guard lock(mutex_);
    held_ = true;
  }
  // Notifies under the lock: a released call may return, and the engine
  // destroy this backend, as soon as the lock is free.
  void release() {
    std::lock_guard lock(mutex_);
    held_ = false;
    cv_.notify_all();
  }
  int entered() {
    std::lock_guard lock(mutex_);
    return entered_;
  }

 private:
  void pass() {
    std::unique_lock lock(mutex_);
    ++entered_;
    cv_.wait(lock, [&] { return !held_; });
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  bool held_ = false;
  int entered_ = 0;
};

TEST(StorageEngine, BackendFailuresCompleteWithTheirStatusAndAreCounted) {
  auto backend = std::make_unique<ScriptedBackend>();
  backend->fail_ = true;
  StorageEngine engine(std::move(backend), 2);
  const auto keys = storage_keys(small_fingerprint(), prompt(8, 3));
  std::vector<StorageEngine::Ticket> tickets = {engine.submit_exists(keys),
                                                engine.submit_get(keys, small_fingerprint(), kPage),
                                                engine.submit_set(keys, encoded_pages(small_fingerprint(), keys, kPage, 1))};
  for (auto t : tickets) {
    const auto done = engine.wait(t);
    EXPECT_EQ(done.status.code(), StatusCode::kUnavailable);
    EXPECT_EQ(done.hits, 0u);
  }
  const StorageStats s = engine.stats();
  EXPECT_EQ(s.errors(), 3u);
  EXPECT_EQ(s.exists_errors, 1u);
  EXPECT_EQ(s.get_errors, 1u);
  EXPECT_EQ(s.set_errors, 1u);
  EXPECT_EQ(s.miss_blocks, 2u);
  EXPECT_EQ(s.set_blocks, 0u);
  EXPECT_EQ(s.bytes_written, 0u);
}

// drain() returns once nothing is queued or running; wait_for_completion()
// reports whether a finished operation awaits collection.
TEST(StorageEngine, DrainWaitsForQueuedAndRunningWork) {
  auto backend = std::make_unique<ScriptedBackend>();
  ScriptedBackend& scripted = *backend;
  scripted.hold();
  StorageEngine engine(std::move(backend), 1);
  const StorageFingerprint fp = small_fingerprint();
  const auto keys = storage_keys(fp, prompt(8, 4));
  engine.submit_exists(keys);
  engine.submit_exists(keys);
  EXPECT_FALSE(engine.wait_for_completion(0.0));
  std::thread releaser([&] {
    while (scripted.entered() == 0) std::this_thread::yield();
    scripted.release();
  });
  engine.drain();
  releaser.join();
  EXPECT_EQ(scripted.entered(), 2);  // both ran before drain returned
  EXPECT_TRUE(engine.wait_for_completion(0.0));
  EXPECT_EQ(engine.poll().size(), 2u);
  EXPECT_EQ(engine.outstanding(), 0u);
}

// Sets block until released; reads answer at once.
class SlowWrites : public StorageBackend {
 public:
  std::string_view name() const override { return "slow-writes"; }
  Result<size_t> exists(std::span<const StorageKey> keys) override {
    std::lock_guard lock(mutex_);
    size_t held = 0;
    while (held < keys.size() && stored_.contains(keys[held])) ++held;
    return held;
  }
  Status read(std::span<const StorageKey> keys, const ValueVisitor& visit) override {
    for (size_t i = 0; i < keys.size() && visit(i, {}); ++i) {
    }
    return Status::ok();
  }
  Status set(std::span<const StorageKey> keys, std::span<const std::vector<std::byte>>) override {
    std::unique_lock lock(mutex_);
    ++sets_entered_;
    sets_ += keys.size();
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
    for (const StorageKey& k : keys) stored_.insert(k);
    return Status::ok();
  }
  void hold_sets(bool hold) {
    std::lock_guard lock(mutex_);
    open_ = !hold;
    cv_.notify_all();
  }
  void wait_sets_entered(int n) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return sets_entered_ >= n; });
  }
  int sets_entered() {
    std::lock_guard lock(mutex_);
    return sets_entered_;
  }
  size_t keys_set() {
    std::lock_guard lock(mutex_);
    return sets_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = true;
  int sets_entered_ = 0;
  size_t sets_ = 0;
  std::unordered_set<StorageKey, StorageKeyHash> stored_;
};

// A probe submitted behind writes to a stalled backend completes while they
// wait: reads go first, and one worker is always left for them.
TEST(StorageEngine, ReadsDoNotQueueBehindWrites) {
  auto backend = std::make_unique<SlowWrites>();
  SlowWrites& slow = *backend;
  slow.hold_sets(true);
  StorageEngine engine(std::move(backend), 2);
  const StorageFingerprint fp = small_fingerprint();
  const auto keys = storage_keys(fp, prompt(16, 5));
  const auto first = engine.submit_set({keys[0]}, encoded_pages(fp, {keys[0]}, kPage, 1));
  const auto second = engine.submit_set({keys[1]}, encoded_pages(fp, {keys[1]}, kPage, 2));
  slow.wait_sets_entered(1);
  const auto probe = engine.wait(engine.submit_exists(keys));  // would hang if it queued behind `second`
  EXPECT_TRUE(probe.status.is_ok());
  EXPECT_EQ(slow.sets_entered(), 1) << "two writes ran at once on two workers";
  slow.hold_sets(false);
  EXPECT_TRUE(engine.wait(first).status.is_ok());
  EXPECT_TRUE(engine.wait(second).status.is_ok());
}

// skip_stored: the run of keys another writer stored is neither gathered nor sent.
TEST(StorageEngine, SkipStoredWritesOnlyWhatStorageLacks) {
  for (const int threads : {0, 1}) {
    auto backend = std::make_unique<SlowWrites>();
    SlowWrites& slow = *backend;
    StorageEngine engine(std::move(backend), threads);
    const StorageFingerprint fp = small_fingerprint();
    const auto keys = storage_keys(fp, prompt(16, 6));  // 4 blocks
    ASSERT_TRUE(engine.wait(engine.submit_set({keys[0], keys[1]}, encoded_pages(fp, {keys[0], keys[1]}, kPage, 1)))
                    .status.is_ok());
    std::atomic<int> gathered = 0;
    const auto done = engine.wait(engine.submit_set(
        keys, fp, kPage, [&](size_t i, std::span<std::byte>) { gathered += static_cast<int>(i) + 1; },
        /*skip_stored=*/true));
    ASSERT_TRUE(done.status.is_ok());
    EXPECT_EQ(done.hits, 4u);
    EXPECT_EQ(gathered.load(), 3 + 4) << "only pages 2 and 3 were gathered";
    EXPECT_EQ(slow.keys_set(), 2u + 2u);
    EXPECT_EQ(engine.stats().set_skipped_blocks, 2u);
    EXPECT_EQ(engine.stats().set_blocks, 2u + 4u);
  }
}

TEST(StorageEngine, MismatchedSetAndUnknownTicketsAreRefused) {
  StorageEngine engine(memory(), 1);
  const auto keys = storage_keys(small_fingerprint(), prompt(8, 4));
  const auto done = engine.wait(engine.submit_set(keys, {}));
  EXPECT_EQ(done.status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.wait(12345).status.code(), StatusCode::kFailedPrecondition);
  const auto t = engine.submit_exists(keys);
  ASSERT_TRUE(engine.wait(t).status.is_ok());
  EXPECT_EQ(engine.wait(t).status.code(), StatusCode::kFailedPrecondition) << "collected twice";
}

TEST(StorageEngine, PollNeverBlocks) {
  auto backend = std::make_unique<ScriptedBackend>();
  ScriptedBackend* scripted = backend.get();
  scripted->hold();
  StorageEngine engine(std::move(backend), 1);
  const auto t = engine.submit_exists(storage_keys(small_fingerprint(), prompt(8, 5)));
  while (scripted->entered() == 0) std::this_thread::yield();
  EXPECT_TRUE(engine.poll().empty());  // the operation is running, held
  EXPECT_EQ(engine.outstanding(), 1u);
  scripted->release();
  std::vector<StorageEngine::Completion> done;
  while (done.empty()) {
    done = engine.poll();
    std::this_thread::yield();
  }
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].ticket, t);
  EXPECT_EQ(engine.outstanding(), 0u);
}

TEST(StorageEngine, DestructionDropsQueuedWorkAndWaitsForRunningWork) {
  auto backend = std::make_unique<ScriptedBackend>();
  ScriptedBackend* scripted = backend.get();
  scripted->hold();
  auto engine = std::make_unique<StorageEngine>(std::move(backend), 2);
  const auto keys = storage_keys(small_fingerprint(), prompt(8, 6));
  for (int i = 0; i < 50; ++i) engine->submit_exists(keys);
  while (scripted->entered() < 2) std::this_thread::yield();  // both workers are inside the backend
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    scripted->release();
  });
  engine.reset();  // returns once the two running calls do; the 48 queued never run
  releaser.join();
}

// Many threads submit at once; every ticket comes back exactly once, with its
// operation — collected by one polling thread, or by each submitter waiting
// for its own. (A ticket is collected once: a waiter and a poller must not
// compete for the same one.)
TEST(StorageEngine, ConcurrentSubmitsCompleteExactlyOnce) {
  const StorageFingerprint fp = small_fingerprint();
  constexpr int kSubmitters = 4, kEach = 150;
  for (const bool polled : {true, false}) {
    SCOPED_TRACE(polled ? "one poller" : "submitters wait");
    StorageEngine engine(memory(), 3);
    std::mutex mutex;
    std::map<StorageEngine::Ticket, StorageOp> issued;
    std::multimap<StorageEngine::Ticket, StorageOp> collected;
    std::atomic<int> submitters_left{kSubmitters}, failed{0};
    auto collect = [&](const StorageEngine::Completion& c) {
      std::lock_guard lock(mutex);
      collected.emplace(c.ticket, c.op);
      if (!c.status.is_ok()) ++failed;
    };

    std::vector<std::thread> threads;
    for (int s = 0; s < kSubmitters; ++s) {
      threads.emplace_back([&, s] {
        for (int i = 0; i < kEach; ++i) {
          const auto keys = storage_keys(fp, prompt(16, static_cast<uint32_t>(i % 10)));
          StorageEngine::Ticket t;
          StorageOp op;
          switch ((i + s) % 3) {
            case 0: t = engine.submit_set(keys, encoded_pages(fp, keys, kPage, 5)), op = StorageOp::kSet; break;
            case 1: t = engine.submit_get(keys, fp, kPage), op = StorageOp::kGet; break;
            default: t = engine.submit_exists(keys), op = StorageOp::kExists; break;
          }
          {
            std::lock_guard lock(mutex);
            issued.emplace(t, op);
          }
          if (!polled) collect(engine.wait(t));
        }
        --submitters_left;
      });
    }
    std::thread poller([&] {
      if (!polled) return;
      for (;;) {
        const bool last_round = submitters_left.load() == 0;
        for (const auto& c : engine.poll()) collect(c);
        if (last_round && engine.outstanding() == 0) break;
        std::this_thread::yield();
      }
    });
    for (std::thread& t : threads) t.join();
    poller.join();

    EXPECT_EQ(failed.load(), 0);
    ASSERT_EQ(issued.size(), size_t{kSubmitters * kEach}) << "a ticket was issued twice";
    ASSERT_EQ(collected.size(), issued.size());
    for (const auto& [t, op] : issued) {
      ASSERT_EQ(collected.count(t), 1u) << "ticket " << t;
      EXPECT_EQ(collected.find(t)->second, op) << "ticket " << t;
    }
    EXPECT_EQ(engine.outstanding(), 0u);
    const StorageStats st = engine.stats();
    EXPECT_EQ(st.exists_calls + st.get_calls + st.set_calls, uint64_t{kSubmitters * kEach});
    EXPECT_EQ(st.errors(), 0u);
    EXPECT_EQ(st.corrupt_values, 0u);
  }
}

}  // namespace
}  // namespace hiq
