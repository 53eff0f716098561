// core/parallel.h: every index is run exactly once, whatever the thread count;
// a loop nested in another, or started while another runs, runs on its
// caller; the thread count can change between loops; a loop is over for
// every thread when it returns, whether the workers were watching or asleep.
// A team runs one rank on each thread, its barrier orders what ranks write,
// and its chunks cover every index once, a slowed rank's taken over.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/parallel.h"

namespace hiq {
namespace {

TEST(ParallelFor, EveryIndexOnceForAnyThreadCountAndGrain) {
  const int before = parallel_threads();
  // 70 threads: more than a short loop has ranges (64).
  for (int threads : {1, 2, 4, 7, 70}) {
    set_parallel_threads(threads);
    EXPECT_EQ(parallel_threads(), threads);
    // Short loops (a range a thread) and long ones (chunks in turn).
    for (int64_t n : {0, 1, 5, 64, 1001, 100000}) {
      for (int64_t grain : {1, 3, 100, 5000}) {
        std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
        std::atomic<int> calls{0}, short_calls{0};
        parallel_for(n, grain, [&](int64_t first, int64_t last) {
          ++calls;
          EXPECT_LT(first, last);
          if (last - first < grain) ++short_calls;
          for (int64_t i = first; i < last; ++i) ++seen[static_cast<size_t>(i)];
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)].load(), 1) << i;
        EXPECT_LE(short_calls.load(), 1) << "ranges shorter than the grain, n " << n << ", grain " << grain;
        if (n <= grain) {
          EXPECT_EQ(calls.load(), n > 0 ? 1 : 0);
        }
      }
    }
  }
  set_parallel_threads(before);
}

TEST(ParallelFor, NestedAndConcurrentLoopsRunOnTheirCaller) {
  const int before = parallel_threads();
  set_parallel_threads(4);
  std::atomic<int64_t> total{0};
  const auto loop = [&] {
    parallel_for(64, 1, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i)
        parallel_for(10, 1, [&](int64_t a, int64_t b) { total += b - a; });  // nested: serial
    });
  };
  std::vector<std::thread> callers;
  for (int i = 0; i < 3; ++i) callers.emplace_back(loop);
  loop();
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 64 * 10);
  set_parallel_threads(before);
}

TEST(ParallelFor, ALoopOnOneThreadRunsTheLoopsItCallsOnItsCaller) {
  const int before = parallel_threads();
  set_parallel_threads(1);
  int64_t total = 0;  // one thread: no atomics needed
  parallel_for(4, 1, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) parallel_for(5, 1, [&](int64_t a, int64_t b) { total += b - a; });
  });
  EXPECT_EQ(total, 4 * 5);
  set_parallel_threads(before);
}

TEST(ParallelFor, BackToBackLoopsAndLoopsAfterTheWorkersSleepEachFinishBeforeReturning) {
  const int before = parallel_threads();
  set_parallel_threads(3);
  // Each loop writes into storage that dies when it returns: a worker still
  // on a loop's job after that is caught here, or by ASan (stack use after
  // scope). A worker that read the job before counting itself busy would
  // reuse the next loop's job in the same stack slot: that needs TSan (the
  // tsan preset) to see.
  const auto loop_once = [](int tag) {
    std::vector<int> written(16, -1);
    parallel_for(16, 1, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) written[static_cast<size_t>(i)] = tag;
    });
    for (int v : written) ASSERT_EQ(v, tag);
  };
  for (int tag = 0; tag < 20000; ++tag) loop_once(tag);  // the workers watch, never sleep
  for (int tag = 0; tag < 5; ++tag) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // past their watch: asleep
    loop_once(tag);
  }
  set_parallel_threads(before);
}

TEST(ParallelTeam, EachRankOnItsOwnThreadAndBarriersOrderWhatTheyWrite) {
  const int before = parallel_threads();
  for (int threads : {1, 2, 3, 7}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    set_parallel_threads(threads);
    std::mutex mutex;
    std::set<std::thread::id> ids;
    std::vector<int> ranks_seen;
    // Round r: each rank writes its slot, then after the barrier reads
    // every rank's (plain ints: only the barrier orders them, which TSan checks).
    constexpr int kRounds = 200;
    std::vector<int> slots(static_cast<size_t>(threads), -1);
    std::atomic<int> wrong{0};
    parallel_team([&](Team& team) {
      {
        std::lock_guard lock(mutex);
        ids.insert(std::this_thread::get_id());
        ranks_seen.push_back(team.rank());
        EXPECT_EQ(team.size(), threads);
      }
      for (int round = 0; round < kRounds; ++round) {
        slots[static_cast<size_t>(team.rank())] = round;
        team.barrier();
        for (int v : slots)
          if (v != round) ++wrong;
        team.barrier();  // before anyone writes the next round
      }
    });
    EXPECT_EQ(wrong.load(), 0);
    EXPECT_EQ(ids.size(), static_cast<size_t>(threads));
    std::sort(ranks_seen.begin(), ranks_seen.end());
    ASSERT_EQ(ranks_seen.size(), static_cast<size_t>(threads));
    for (int r = 0; r < threads; ++r) EXPECT_EQ(ranks_seen[static_cast<size_t>(r)], r);
  }
  set_parallel_threads(before);
}

TEST(ParallelTeam, ChunksCoverEveryIndexOnceAndASlowRanksAreTakenOver) {
  const int before = parallel_threads();
  for (int threads : {1, 2, 3, 8}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    set_parallel_threads(threads);
    for (int64_t n : {0, 1, 5, 16, 100, 1000}) {
      for (int64_t unit : {1, 16}) {
        std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
        std::atomic<int> misaligned{0};
        parallel_team([&](Team& team) {
          // Several calls in a row: each one's cursors were reset by the one before.
          for (int call = 0; call < 5; ++call)
            team.for_chunks(n, unit, [&](int64_t first, int64_t last) {
              if (first % unit != 0 || (last % unit != 0 && last != n) || first >= last) ++misaligned;
              for (int64_t i = first; i < last; ++i) ++seen[static_cast<size_t>(i)];
            });
        });
        EXPECT_EQ(misaligned.load(), 0) << "n " << n << ", unit " << unit;
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)].load(), 5) << i;
      }
    }
  }
  // Rank 1 does not start until rank 0 has run every chunk: rank 0 takes
  // over all of rank 1's. (Without the taking over, rank 1 gives up waiting
  // after 10 s and the count below fails; with it, timing plays no part.)
  set_parallel_threads(2);
  std::atomic<int> done{0};
  std::vector<int> runner(64, -1);
  parallel_team([&](Team& team) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    if (team.rank() == 1)
      while (done.load() < 64 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    team.for_chunks(64, 1, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) runner[static_cast<size_t>(i)] = team.rank();
      done += static_cast<int>(last - first);
    });
  });
  EXPECT_EQ(std::count(runner.begin(), runner.end(), 0), 64);
  set_parallel_threads(before);
}

TEST(ParallelTeam, ATeamInsideALoopOrBesideAnotherCallerIsATeamOfOne) {
  const int before = parallel_threads();
  set_parallel_threads(4);
  std::atomic<int> ranks{0}, wrong_size{0};
  parallel_for(8, 1, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i)
      parallel_team([&](Team& team) {
        ++ranks;
        if (team.size() != 1 || team.rank() != 0) ++wrong_size;
        team.barrier();  // a team of one passes its barrier alone
        team.for_chunks(10, 1, [&](int64_t, int64_t) {});
      });
  });
  EXPECT_EQ(ranks.load(), 8);
  EXPECT_EQ(wrong_size.load(), 0);
  // Teams from several threads at once: one holds the pool, the others run
  // alone; every rank of every team runs.
  std::atomic<int> total{0};
  const auto team_once = [&] {
    for (int k = 0; k < 200; ++k)
      parallel_team([&](Team& team) {
        team.for_chunks(40, 1, [&](int64_t first, int64_t last) { total += static_cast<int>(last - first); });
      });
  };
  std::vector<std::thread> callers;
  for (int i = 0; i < 3; ++i) callers.emplace_back(team_once);
  team_once();
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 200 * 40);
  set_parallel_threads(before);
}

}  // namespace
}  // namespace hiq
