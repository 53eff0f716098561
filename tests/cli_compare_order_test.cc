// Tests of tools/hiq/compare_order.h: the order of `hiq bench serve --compare`.
#include "tools/hiq/compare_order.h"

#include <gtest/gtest.h>

#include <vector>

namespace hiq::cli {
namespace {

std::vector<size_t> order(size_t repeat, size_t n) {
  std::vector<size_t> o;
  for (size_t p = 0; p < n; ++p) o.push_back(compare_run_index(repeat, p, n));
  return o;
}

TEST(CompareOrder, EveryRepeatRunsEveryConfigurationOnce) {
  for (size_t n = 1; n <= 7; ++n)
    for (size_t repeat = 0; repeat < 4 * n; ++repeat) {
      std::vector<int> seen(n, 0);
      for (size_t c : order(repeat, n)) {
        ASSERT_LT(c, n);
        ++seen[c];
      }
      EXPECT_EQ(seen, std::vector<int>(n, 1)) << "n=" << n << " repeat=" << repeat;
    }
}

TEST(CompareOrder, OddRepeatsRunTheirPairBackwards) {
  for (size_t n = 1; n <= 7; ++n)
    for (size_t repeat = 0; repeat < 4 * n; repeat += 2)
      for (size_t p = 0; p < n; ++p)
        EXPECT_EQ(compare_run_index(repeat + 1, p, n), compare_run_index(repeat, n - 1 - p, n))
            << "n=" << n << " repeat=" << repeat << " position=" << p;
}

TEST(CompareOrder, TwiceTheConfigurationsPutsEachAtEveryPlaceTwice) {
  for (size_t n = 1; n <= 7; ++n) {
    std::vector<std::vector<int>> count(n, std::vector<int>(n, 0));  // [configuration][position]
    for (size_t repeat = 0; repeat < 2 * n; ++repeat)
      for (size_t p = 0; p < n; ++p) ++count[compare_run_index(repeat, p, n)][p];
    for (size_t c = 0; c < n; ++c)
      for (size_t p = 0; p < n; ++p) EXPECT_EQ(count[c][p], 2) << "n=" << n << " config=" << c << " position=" << p;
  }
}

TEST(CompareOrder, TheFirstPairIsForwardThenBackward) {
  EXPECT_EQ(order(0, 3), (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(order(1, 3), (std::vector<size_t>{2, 1, 0}));
  EXPECT_EQ(order(2, 3), (std::vector<size_t>{1, 2, 0}));  // the next pair starts one later
  EXPECT_EQ(order(3, 3), (std::vector<size_t>{0, 2, 1}));
}

}  // namespace
}  // namespace hiq::cli
