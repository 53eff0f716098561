// ExtentAllocator against a model: a bitmap of the region. Every granule is
// handed out at most once, frees coalesce, best fit takes the smallest run,
// and errors change nothing.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "memory/extent_allocator.h"

namespace hiq {
namespace {

TEST(ExtentAllocator, BestFitTakesTheSmallestRunThatHolds) {
  ExtentAllocator a(100);
  const auto x = *a.allocate(10), y = *a.allocate(20), z = *a.allocate(30);
  EXPECT_EQ(x, 0u);
  EXPECT_EQ(y, 10u);
  EXPECT_EQ(z, 30u);
  ASSERT_TRUE(a.free(x, 10).is_ok());  // free runs: [0, 10) and [60, 100)
  EXPECT_EQ(*a.allocate(8), 0u) << "the 10-granule run, not the 40";
  EXPECT_EQ(*a.allocate(12), 60u);
  EXPECT_EQ(a.free_runs(), 2u);
  EXPECT_EQ(a.largest_free_run(), 28u);
  EXPECT_TRUE(a.check().is_ok());
}

TEST(ExtentAllocator, FreesCoalesceAndMayReturnPartOfARun) {
  ExtentAllocator a(64);
  const auto run = *a.allocate(64);
  EXPECT_EQ(a.allocate(1).status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(a.free(run + 16, 16).is_ok());  // the middle
  ASSERT_TRUE(a.free(run + 48, 16).is_ok());  // the tail
  EXPECT_EQ(a.free_runs(), 2u);
  EXPECT_EQ(a.allocate(17).status().code(), StatusCode::kResourceExhausted) << "32 free, but in two runs of 16";
  ASSERT_TRUE(a.free(run + 32, 16).is_ok());  // joins both
  EXPECT_EQ(a.free_runs(), 1u);
  EXPECT_EQ(a.largest_free_run(), 48u);
  EXPECT_TRUE(a.is_allocated(run + 15));
  EXPECT_FALSE(a.is_allocated(run + 16));
  EXPECT_TRUE(a.check().is_ok());
}

TEST(ExtentAllocator, BadFreesAreRefusedAndChangeNothing) {
  ExtentAllocator a(32);
  const auto x = *a.allocate(8);
  const auto y = *a.allocate(8);
  ASSERT_TRUE(a.free(x, 8).is_ok());
  EXPECT_EQ(a.free(x, 8).code(), StatusCode::kFailedPrecondition) << "twice";
  EXPECT_EQ(a.free(y + 4, 8).code(), StatusCode::kFailedPrecondition) << "past the run's end";
  EXPECT_EQ(a.free(20, 2).code(), StatusCode::kFailedPrecondition) << "never allocated";
  EXPECT_EQ(a.free(y, UINT64_MAX).code(), StatusCode::kFailedPrecondition) << "overflowing";
  EXPECT_EQ(a.allocate(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a.free_count(), 24u);
  EXPECT_TRUE(a.is_allocated(y));
  EXPECT_TRUE(a.check().is_ok());
}

// Thousands of random allocations (token runs of three sizes, as three
// codecs' tokens would take) and frees of whole runs or parts of them.
TEST(ExtentAllocator, RandomisedAgainstABitmap) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    std::mt19937 rng(seed);
    constexpr uint64_t kCapacity = 4096;
    ExtentAllocator a(kCapacity);
    std::vector<bool> used(kCapacity, false);
    struct Run {
      uint64_t offset, length;
    };
    std::vector<Run> runs;
    const uint64_t sizes[] = {9, 16, 32};  // granules per token of int4h-, int8- and bf16-like codecs
    for (int step = 0; step < 8000; ++step) {
      if (rng() % 100 < 55) {
        const uint64_t length = sizes[rng() % 3] * (1 + rng() % 4);
        uint64_t longest = 0, current = 0;
        for (bool u : used) longest = std::max(longest, current = u ? 0 : current + 1);
        auto got = a.allocate(length);
        ASSERT_EQ(got.is_ok(), longest >= length) << "step " << step;
        if (got.is_ok()) {
          for (uint64_t g = *got; g < *got + length; ++g) {
            ASSERT_FALSE(used[g]) << "granule " << g << " handed out twice";
            used[g] = true;
          }
          runs.push_back({*got, length});
        }
      } else if (!runs.empty()) {
        const size_t i = rng() % runs.size();
        Run r = runs[i];
        // A whole run, or a part at its start or end (a node split in two).
        uint64_t from = r.offset, length = r.length;
        if (r.length > 1 && rng() % 3 == 0) {
          const uint64_t cut = 1 + rng() % (r.length - 1);
          if (rng() % 2 == 0) {
            length = cut;
            runs[i] = {r.offset + cut, r.length - cut};
          } else {
            from = r.offset + cut;
            length = r.length - cut;
            runs[i] = {r.offset, cut};
          }
        } else {
          runs.erase(runs.begin() + static_cast<std::ptrdiff_t>(i));
        }
        ASSERT_TRUE(a.free(from, length).is_ok()) << "step " << step;
        for (uint64_t g = from; g < from + length; ++g) used[g] = false;
        ASSERT_EQ(a.free(from, 1).code(), StatusCode::kFailedPrecondition) << "a double free went through";
      }
      uint64_t used_count = 0;
      for (bool u : used) used_count += u;
      ASSERT_EQ(a.used_count(), used_count) << "step " << step;
      if (step % 97 == 0) {
        ASSERT_TRUE(a.check().is_ok()) << a.check().to_string();
      }
    }
    for (const Run& r : runs) ASSERT_TRUE(a.free(r.offset, r.length).is_ok());
    EXPECT_EQ(a.free_count(), kCapacity);
    EXPECT_EQ(a.free_runs(), 1u) << "everything coalesced back into one run";
    EXPECT_TRUE(a.check().is_ok());
  }
}

}  // namespace
}  // namespace hiq
