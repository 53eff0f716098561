// core/parallel.h — data-parallel loops on a process-wide pool of threads.
//
// parallel_for splits [0, n) into contiguous ranges and runs them on the
// pool's workers and the calling thread. It is for loops whose iterations are
// independent and whose results do not depend on the split (each index
// computed the same way whichever thread runs it), so a forward pass gives
// the same bits on 1 thread as on 16. One loop runs on the pool at a time: a
// call made while another is running — from another thread, or nested inside
// `fn` — runs on its caller alone.
//
// parallel_team runs one function on every thread of the pool at once, for
// work whose steps are too short to hand out one at a time (a decode step:
// a dozen steps a layer of a few microseconds each). The threads split each
// step among themselves (Team::for_chunks) and wait for each other only
// where one needs what another wrote (Team::barrier).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

namespace hiq {

// Threads a parallel_for uses, the caller's included (≥ 1). The default is
// the cores the process may run on (its CPU affinity), else
// std::thread::hardware_concurrency(). Waits for a loop in progress; not to
// be called from inside one, even one that runs on its caller alone.
void set_parallel_threads(int threads);
int parallel_threads();

// Calls fn(begin, end) on disjoint ranges covering [0, n), each of at least
// `grain` indices (the last may be shorter); returns when every call has
// returned. n ≤ grain, or one thread: one call, on the caller.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// The threads of one parallel_team call; each has its own Team, with its rank.
class Team {
 public:
  // What the ranks share: their number, the barrier's state, and each
  // rank's cursor into its chunks (for_chunks).
  struct Sync {
    explicit Sync(int ranks) : size(ranks), cursors(std::make_unique<Cursor[]>(2 * static_cast<size_t>(ranks))) {}
    struct alignas(64) Cursor {
      std::atomic<int> next{0};
    };
    const int size;
    std::atomic<int> arrived{0};     // ranks at the barrier of this round
    std::atomic<uint32_t> round{0};  // barriers passed (a futex word: 32 bits)
    std::unique_ptr<Cursor[]> cursors;  // [parity of the for_chunks call][rank], each on its own cache line
  };

  Team(int rank, Sync& sync) : rank_(rank), sync_(&sync) {}

  int rank() const { return rank_; }
  int size() const { return sync_->size; }
  // Returns once every rank has called it as often as this one has; what a
  // rank wrote before it, every rank may read after it.
  void barrier();
  // Calls fn(begin, end) on chunks of [0, n), each a whole number of `unit`s
  // but the last, until some rank has run every chunk; then the barrier.
  // Every rank calls it with the same n and unit. Rank r runs its own
  // chunks first (the r-th of size() near-even parts of [0, n)), in order,
  // then those of ranks still behind (a core slowed by other work): fn must
  // give the same result on any rank.
  void for_chunks(int64_t n, int64_t unit, const std::function<void(int64_t, int64_t)>& fn);

 private:
  int rank_;
  Sync* sync_;
  uint64_t chunk_calls_ = 0;  // for_chunks calls so far: every rank's count is the same
};

// Calls fn(team) once on each thread of the pool, rank 0 on the caller, and
// returns when every call has returned. Where parallel_for would run on its
// caller alone (one thread, a loop inside a loop, the pool held by another
// caller), fn runs there as the one rank of a team of one. Inside fn,
// parallel_for runs on its caller alone.
void parallel_team(const std::function<void(Team&)>& fn);

}  // namespace hiq
