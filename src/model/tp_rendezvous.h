// model/tp_rendezvous.h — where the ranks of one tensor-parallel pass meet on
// the host, and how a failing rank leaves without anyone waiting for it.
//
// Each rank runs on a thread of its own and meets the others at every sum
// of the pass (CpuTpModel's all-reduce, CudaTpModel's collectives). A rank
// whose pass fails leaves for good: the meeting it would have come to
// completes without it, and every rank there learns of the failure (meet()
// returns false) and stops before its next sum. An error that must not stop
// the others (a restore-wait hook's on a GPU rank, whose pass goes on) is
// recorded instead. The pass's error is the first one left or recorded.
//
// Every rank at a meeting learns the same thing: whether a rank had left by
// the time the meeting was complete, taken once, as it completes. (Each
// rank reading the flag after its own wake-up would let a rank that fails
// just after a meeting stop some of the others at that meeting and not the
// rest: for NCCL, some ranks enqueueing a sum the others never join.)
//
// One rendezvous per pass; no rank may meet after it left.
#pragma once

#include <atomic>
#include <barrier>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"

namespace hiq {

class TpRendezvous {
 public:
  explicit TpRendezvous(int ranks)
      : barrier_(ranks, Complete{this}), made_(static_cast<size_t>(ranks > 0 ? ranks : 0), 0) {}

  // Waits until every rank still in the pass is here; false when one had
  // left by then (the same answer for every rank here).
  bool meet() {
    barrier_.arrive_and_wait();
    return !meeting_failed_;
  }
  // This rank's pass ended in error: no rank waits for it from now on.
  void leave(Status status) {
    record(std::move(status));
    failed_.store(true);  // before the drop, so a meeting it completes sees it
    barrier_.arrive_and_drop();
  }
  // An error the pass carries to its end, its ranks still meeting.
  void record(Status status) {
    std::lock_guard lock(mutex_);
    if (first_error_.is_ok()) first_error_ = std::move(status);
  }
  // Counts a sum `rank` joins (only its own thread counts for it), and reads
  // the count: whether a failing rank may have left the others' sums waiting.
  void count_sum(int rank) { ++made_[static_cast<size_t>(rank)]; }
  int sums_made(int rank) const { return made_[static_cast<size_t>(rank)]; }

  bool failed() const { return failed_.load(); }
  Status first_error() const {
    std::lock_guard lock(mutex_);
    return first_error_;
  }

 private:
  // Runs once per meeting, as it completes, before any rank is released.
  struct Complete {
    TpRendezvous* self;
    void operator()() noexcept { self->meeting_failed_ = self->failed_.load(); }
  };

  std::atomic<bool> failed_{false};
  bool meeting_failed_ = false;  // the latest meeting's answer: written as it completes, read after
  std::barrier<Complete> barrier_;
  std::vector<int> made_;  // per rank, touched by its thread alone
  mutable std::mutex mutex_;
  Status first_error_;
};

// Runs `rank(r)` for r = 0 … ranks − 1: rank 0 on the calling thread, the
// others on threads of their own, and joins them. A thread that cannot be
// started fails the pass: the ranks it leaves out (and rank 0) leave the
// rendezvous with that error, so the started ones never wait for them.
template <typename Rank>
void run_rank_threads(TpRendezvous& rendezvous, int ranks, Rank&& rank) {
  std::vector<std::jthread> threads;
  int started = 1;
  try {
    threads.reserve(static_cast<size_t>(ranks));
    for (; started < ranks; ++started) threads.emplace_back([&rank, r = started] { rank(r); });
  } catch (const std::exception& e) {
    const Status error = resource_exhausted(std::string("tensor parallelism: a rank's thread: ") + e.what());
    for (int r = started; r < ranks; ++r) rendezvous.leave(error);
    rendezvous.leave(error);  // rank 0's
    return;                   // the started threads stop at their next meeting and are joined here
  }
  rank(0);
}

}  // namespace hiq
