// core/parallel.h: every index is run exactly once, whatever the thread count;
// a loop nested in another, or started while another runs, runs on its
// caller; the thread count can change between loops.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/parallel.h"

namespace hiq {
namespace {

TEST(ParallelFor, EveryIndexOnceForAnyThreadCountAndGrain) {
  const int before = parallel_threads();
  for (int threads : {1, 2, 4, 7}) {
    set_parallel_threads(threads);
    EXPECT_EQ(parallel_threads(), threads);
    for (int64_t n : {0, 1, 5, 64, 1001}) {
      for (int64_t grain : {1, 3, 100, 5000}) {
        std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
        std::atomic<int> calls{0};
        parallel_for(n, grain, [&](int64_t first, int64_t last) {
          ++calls;
          EXPECT_LT(first, last);
          for (int64_t i = first; i < last; ++i) ++seen[static_cast<size_t>(i)];
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)].load(), 1) << i;
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

}  // namespace
}  // namespace hiq
