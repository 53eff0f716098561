#include "core/parallel.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/check.h"

namespace hiq {
namespace {

thread_local bool in_loop = false;  // this thread is running a parallel_for's range

// Waits until done() or kSpin has passed, whichever is first. The first
// microseconds spin on the CPU's pause instruction: a loop's hand-off is
// seen within tens of nanoseconds, where sched_yield (a system call, slower
// still in a VM) took a microsecond or more a look, as much as a decode
// step's smaller loops take to run. Then it yields, so that a thread
// waiting longer leaves its core to others.
constexpr std::chrono::microseconds kSpin{200}, kPauseOnly{20};

// A loop of fewer grains than this a thread is short (Job): its grain is
// about the work that pays for a hand-off (a few microseconds), so a short
// loop is over in tens of microseconds, too soon for a slowed-down thread
// to matter much, and its ranges stay on their threads.
constexpr int64_t kShortLoopGrains = 16;
template <typename Done>
void spin_until(Done done) {
  const auto start = std::chrono::steady_clock::now();
  while (!done()) {
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited >= kSpin) return;
    if (waited < kPauseOnly) {
      for (int i = 0; i < 32 && !done(); ++i) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        asm volatile("yield" ::: "memory");
#endif
      }
    } else {
      std::this_thread::yield();
    }
  }
}

// A loop's indices, handed out in one of two ways:
//   - A short loop (a decode step's): one range a thread, thread i taking
//     range i first, then any range no one has taken. A thread thus computes
//     the same rows loop after loop and finds the weights it read last time
//     in its own cache, where ranges handed out in turn landed on either
//     core; the ranges are claimed in one word, a cache line the threads
//     pass between them once or twice a loop.
//   - A long loop: a few chunks a thread, taken in turn from one counter, so
//     that a thread that is slowed down (a busy core) leaves its share to
//     the others.
// Or a team (parallel_team): thread i runs rank i, and only thread i, since
// the ranks wait for each other.
struct Job {
  static constexpr int kMaxRanges = 64;  // bits of `claimed`

  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0;
  int64_t size = 1;                        // indices a range or a chunk (the last may have fewer)
  int ranges = 0;                          // short loop: its ranges; 0: a long loop
  std::atomic<uint64_t> claimed{0};        // short loop: bit r, range r taken
  std::atomic<int64_t> next{0};            // long loop: the next chunk's first index

  const std::function<void(Team&)>* team_fn = nullptr;  // a team's function, or none
  Team::Sync* team = nullptr;
  std::unique_ptr<std::atomic<bool>[]> rank_taken;  // a team's: rank r has run (a thread may see a job twice)

  // noexcept: an exception out of fn ends the process here, on the caller
  // as on a worker, rather than leaving the job published or a team's other
  // ranks at a barrier that never opens.
  void run(int thread) noexcept {
    in_loop = true;
    if (team_fn != nullptr) {
      if (!rank_taken[static_cast<size_t>(thread)].exchange(true)) {
        Team rank(thread, *team);
        (*team_fn)(rank);
        // No rank leaves before all have run: the caller withdraws the job
        // only once every thread has taken its rank.
        rank.barrier();
      }
    } else if (ranges > 0) {
      for (int k = 0; k < ranges; ++k) {
        const int r = (thread + k) % ranges;
        const uint64_t bit = uint64_t{1} << r;
        if ((claimed.fetch_or(bit) & bit) == 0) (*fn)(r * size, std::min(n, (r + 1) * size));
      }
    } else {
      for (int64_t begin = next.fetch_add(size); begin < n; begin = next.fetch_add(size))
        (*fn)(begin, std::min(begin + size, n));
    }
    in_loop = false;
  }
};

// The hand-off takes no lock while the workers are watching (a decode step
// runs dozens of loops of a few microseconds each). A loop is published by
// storing its job and bumping `generation_`; a worker that sees the bump
// counts itself in `busy_`, then takes the job if one is still published.
// The caller, once its own share is done, withdraws the job and waits for
// `busy_` to fall to zero. Both sides write first and read second
// (busy_ then job_; job_ then busy_), all sequentially consistent, so at
// least one sees the other: a worker either finds the job withdrawn or is
// waited for, and no worker touches a job after its loop has returned.
// Workers that watched in vain for kSpin sleep on `wake_`, and the caller
// that outwaits kSpin sleeps on `idle_`. Each side wakes the other only when
// it has said it sleeps (`sleepers_`, `caller_waits_`), in the same
// write-then-read order. The sleeper says so and checks its condition under
// `mutex_`, and the waker takes `mutex_` before it notifies, so that no
// wake-up falls between the check and the sleep.
class Pool {
 public:
  static Pool& get() {
    static Pool pool;
    return pool;
  }
  ~Pool() { stop(); }

  int threads() const { return threads_.load(); }
  void set_threads(int threads) {
    HIQ_CHECK(threads >= 1);
    HIQ_CHECK_MSG(!in_loop, "set_parallel_threads inside a parallel_for");
    std::lock_guard call(call_);
    stop();
    threads_ = threads;
  }

  void run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    grain = std::max<int64_t>(grain, 1);
    // On the caller alone: a small loop, one thread, a loop inside a loop,
    // or a loop while another holds the pool. It counts as inside a loop
    // too, so that what it calls in turn runs on its caller (and may not
    // change the thread count); the pool is never held while it runs.
    const auto alone = [&] {
      if (n <= 0) return;
      const bool outer = in_loop;
      in_loop = true;
      fn(0, n);
      in_loop = outer;
    };
    if (n <= grain || in_loop || threads_ == 1) return alone();
    std::unique_lock call(call_, std::try_to_lock);
    if (!call.owns_lock()) return alone();
    Job job;
    job.fn = &fn;
    job.n = n;
    const int64_t threads = threads_.load();
    const bool short_loop = n / grain < kShortLoopGrains * threads;
    const int64_t parts = short_loop ? std::min<int64_t>(threads, Job::kMaxRanges) : threads * 4;
    job.size = std::max(grain, (n + parts - 1) / parts);
    if (short_loop) job.ranges = static_cast<int>((n + job.size - 1) / job.size);
    run_job(job);
  }

  void team(const std::function<void(Team&)>& fn) {
    // A team of one on the caller where parallel_for would run alone.
    const auto alone = [&] {
      Team::Sync sync(1);
      Team rank(0, sync);
      const bool outer = in_loop;
      in_loop = true;
      fn(rank);
      in_loop = outer;
    };
    if (in_loop || threads_ == 1) return alone();
    std::unique_lock call(call_, std::try_to_lock);
    if (!call.owns_lock()) return alone();
    const int threads = threads_.load();
    Team::Sync sync(threads);
    Job job;
    job.team_fn = &fn;
    job.team = &sync;
    job.rank_taken = std::make_unique<std::atomic<bool>[]>(static_cast<size_t>(threads));
    run_job(job);
  }

 private:
  // Offers `job` to the workers, runs its share on the caller (thread 0),
  // and returns once no worker is inside it. call_ is held.
  void run_job(Job& job) {
    if (workers_.empty()) start();
    job_.store(&job);
    generation_.fetch_add(1);
    if (sleepers_.load() > 0) {
      std::lock_guard lock(mutex_);
      wake_.notify_all();
    }
    job.run(0);
    job_.store(nullptr);
    // The workers still on a range finish within microseconds, sooner than a
    // sleeping thread is woken: watch for them for a while, then sleep.
    spin_until([&] { return busy_.load() == 0; });
    if (busy_.load() != 0) {
      std::unique_lock lock(mutex_);
      caller_waits_.store(true);
      idle_.wait(lock, [&] { return busy_.load() == 0; });
      caller_waits_.store(false);
    }
  }

  // The cores this process may run on (its affinity mask: a container or
  // `taskset` may allow fewer than the machine has), else the machine's.
  static int usable_cores() {
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
    const unsigned hardware = std::thread::hardware_concurrency();
    return hardware == 0 ? 1 : static_cast<int>(hardware);
  }
  Pool() { threads_ = usable_cores(); }

  void start() {
    stopping_ = false;
    // The generation before any of them runs: a loop published while one
    // is still starting is not missed.
    const uint64_t seen = generation_.load();
    for (int i = 1; i < threads_.load(); ++i) workers_.emplace_back([this, seen, i] { work(seen, i); });
  }
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      generation_.fetch_add(1);
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
  }

  void work(uint64_t seen, int thread) {
    while (true) {
      // Loops come in bursts (a forward pass runs dozens): watch for the
      // next one for a while before sleeping, which costs a wake-up per loop.
      spin_until([&] { return generation_.load() != seen; });
      if (generation_.load() == seen) {
        std::unique_lock lock(mutex_);
        sleepers_.fetch_add(1);
        wake_.wait(lock, [&] { return stopping_ || generation_.load() != seen; });
        sleepers_.fetch_sub(1);
      }
      if (stopping_.load()) return;
      seen = generation_.load();
      busy_.fetch_add(1);
      if (Job* job = job_.load()) job->run(thread);
      if (busy_.fetch_sub(1) == 1 && caller_waits_.load()) {
        std::lock_guard lock(mutex_);
        idle_.notify_all();
      }
    }
  }

  std::mutex call_;  // held by the one loop running on the pool (and by set_threads)
  std::atomic<int> threads_{1};
  std::vector<std::thread> workers_;
  std::atomic<Job*> job_{nullptr};         // the loop on offer, or none
  std::atomic<uint64_t> generation_{0};    // bumped by each loop offered (and by stop())
  std::atomic<int> busy_{0};               // workers between seeing a bump and leaving its job
  std::mutex mutex_;                       // for the sleeps below
  std::condition_variable wake_, idle_;    // a loop for sleeping workers; busy_ at zero for the caller
  std::atomic<int> sleepers_{0};           // workers asleep on wake_, or about to be
  std::atomic<bool> caller_waits_{false};  // the caller asleep on idle_, or about to be
  std::atomic<bool> stopping_{false};     // written under mutex_, so that a sleeper sees it
};

}  // namespace

void set_parallel_threads(int threads) { Pool::get().set_threads(threads); }

int parallel_threads() { return Pool::get().threads(); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  Pool::get().run(n, grain, fn);
}

void parallel_team(const std::function<void(Team&)>& fn) { Pool::get().team(fn); }

// Chunks a rank's share is cut into in for_chunks: enough that a rank that
// is done can take over most of a slowed one's, few enough that claiming
// them (an atomic add on the owner's cache line) costs little.
constexpr int kChunksPerRank = 4;

void Team::for_chunks(int64_t n, int64_t unit, const std::function<void(int64_t, int64_t)>& fn) {
  HIQ_CHECK(n >= 0 && unit >= 1);
  const int size = sync_->size;
  const int64_t units = (n + unit - 1) / unit, chunks = int64_t{size} * kChunksPerRank;
  const auto edge = [&](int64_t chunk) { return std::min(n, units * chunk / chunks * unit); };
  Sync::Cursor* cursors = sync_->cursors.get() + (chunk_calls_ % 2) * static_cast<uint64_t>(size);
  // The other parity's cursor is reset for the next call: no rank touches it
  // until every rank has passed this call's barrier.
  sync_->cursors[((chunk_calls_ + 1) % 2) * static_cast<uint64_t>(size) + static_cast<uint64_t>(rank_)].next.store(0);
  ++chunk_calls_;
  for (int k = 0; k < size; ++k) {
    const int owner = (rank_ + k) % size;
    for (int i = cursors[owner].next.fetch_add(1); i < kChunksPerRank; i = cursors[owner].next.fetch_add(1)) {
      const int64_t chunk = int64_t{owner} * kChunksPerRank + i;
      if (edge(chunk) < edge(chunk + 1)) fn(edge(chunk), edge(chunk + 1));
    }
  }
  barrier();
}

void Team::barrier() {
  Sync& s = *sync_;
  const uint32_t round = s.round.load();
  if (s.arrived.fetch_add(1) + 1 == s.size) {
    // The last to arrive opens the next round. arrived is reset first: a
    // rank counts itself in the next round only after it sees this one's end.
    s.arrived.store(0);
    s.round.fetch_add(1);
    s.round.notify_all();
    return;
  }
  // Ranks meet within microseconds when their shares are even; one that
  // waits on something outside (a restore) sleeps, leaving its core free.
  spin_until([&] { return s.round.load() != round; });
  while (s.round.load() == round) s.round.wait(round);
}

}  // namespace hiq
