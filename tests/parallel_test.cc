// core/parallel.h: every index is run exactly once, whatever the thread count;
// a loop nested in another, or started while another runs, runs on its
// caller; the thread count can change between loops; a loop is over for
// every thread when it returns, whether the workers were watching or asleep.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
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

}  // namespace
}  // namespace hiq
