// The host meeting point of a tensor-parallel pass (model/tp_rendezvous.h),
// which both the CPU ranks and the GPU ranks meet at: ranks that meet every
// time, a rank that leaves (the others learn of it at the meeting it misses,
// and none waits for it), an error recorded while the ranks go on, and the
// count of a rank's sums. Threads join only if no rank is left waiting: a
// broken rendezvous hangs, and ctest's timeout fails it.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "model/tp_rendezvous.h"

namespace hiq {
namespace {

// Runs `rank(r)` on a thread per rank and joins them.
template <typename Rank>
void run_ranks(int ranks, Rank&& rank) {
  std::vector<std::jthread> threads;
  for (int r = 0; r < ranks; ++r) threads.emplace_back([&, r] { rank(r); });
}

TEST(TpRendezvous, RanksThatAllComeMeetEveryTime) {
  constexpr int kRanks = 4, kMeetings = 200;
  TpRendezvous meeting(kRanks);
  std::atomic<int> met{0};
  run_ranks(kRanks, [&](int) {
    for (int i = 0; i < kMeetings; ++i)
      if (meeting.meet()) ++met;
  });
  EXPECT_EQ(met.load(), kRanks * kMeetings);
  EXPECT_FALSE(meeting.failed());
  EXPECT_TRUE(meeting.first_error().is_ok());
}

// Rank 2 fails right after meeting 10; the others learn of it at meeting
// 11, the one it never comes to, and leave in turn (as a rank's pass does).
// Every rank gets the same answer at every meeting, however late it wakes
// from the one before: many rounds, to give a late waker its chance.
TEST(TpRendezvous, ARankThatLeavesIsSeenByAllAtTheSameMeetingAndWaitedForByNone) {
  constexpr int kRanks = 4, kMeetings = 30, kFailsAfter = 10, kRounds = 200;
  for (int round = 0; round < kRounds; ++round) {
    TpRendezvous meeting(kRanks);
    std::vector<int> meetings(kRanks, 0);
    run_ranks(kRanks, [&](int r) {
      for (int i = 0; i < kMeetings; ++i) {
        if (r == 2 && i == kFailsAfter) {
          meeting.leave(internal_error("rank 2 failed"));
          return;
        }
        if (!meeting.meet()) {
          meeting.leave(failed_precondition("another rank failed"));
          return;
        }
        ++meetings[static_cast<size_t>(r)];
      }
    });
    for (int r = 0; r < kRanks; ++r)
      ASSERT_EQ(meetings[static_cast<size_t>(r)], kFailsAfter) << "rank " << r << ", round " << round;
    ASSERT_TRUE(meeting.failed());
    ASSERT_EQ(meeting.first_error().message(), "rank 2 failed") << "the failing rank's error, not the others'";
  }
}

// A rank that fails before the first meeting: no rank meets at all.
TEST(TpRendezvous, ARankThatFailsFirstLeavesTheOthersNothingToWaitFor) {
  TpRendezvous meeting(3);
  std::atomic<int> met{0};
  run_ranks(3, [&](int r) {
    if (r == 0) {
      meeting.leave(resource_exhausted("no scratch"));
      return;
    }
    while (meeting.meet()) ++met;
    meeting.leave(failed_precondition("another rank failed"));
  });
  EXPECT_EQ(met.load(), 0);
  EXPECT_EQ(meeting.first_error().code(), StatusCode::kResourceExhausted);
}

// A recorded error (a GPU rank's failed restore wait) does not stop the
// meetings; it is the pass's error at the end.
TEST(TpRendezvous, ARecordedErrorLetsTheRanksGoOnAndIsThePassesError) {
  TpRendezvous meeting(2);
  std::atomic<int> met{0};
  run_ranks(2, [&](int r) {
    for (int i = 0; i < 20; ++i) {
      if (r == 1 && i == 5) meeting.record(data_loss("restore lost"));
      if (meeting.meet()) ++met;
    }
  });
  EXPECT_EQ(met.load(), 40);
  EXPECT_FALSE(meeting.failed());
  EXPECT_EQ(meeting.first_error().message(), "restore lost");
}

TEST(TpRendezvous, RunRankThreadsRunsEachRankOnceRankZeroOnTheCaller) {
  TpRendezvous meeting(5);
  std::vector<std::thread::id> ran(5);
  run_rank_threads(meeting, 5, [&](int r) {
    ran[static_cast<size_t>(r)] = std::this_thread::get_id();
    EXPECT_TRUE(meeting.meet());
  });
  EXPECT_EQ(ran[0], std::this_thread::get_id());
  for (int r = 1; r < 5; ++r) {
    EXPECT_NE(ran[static_cast<size_t>(r)], std::thread::id()) << "rank " << r << " did not run";
    EXPECT_NE(ran[static_cast<size_t>(r)], ran[0]);
  }
  EXPECT_TRUE(meeting.first_error().is_ok());
}

TEST(TpRendezvous, CountsEachRanksSums) {
  TpRendezvous meeting(2);
  EXPECT_EQ(meeting.sums_made(0), 0);
  meeting.count_sum(0);
  meeting.count_sum(0);
  meeting.count_sum(1);
  EXPECT_EQ(meeting.sums_made(0), 2);
  EXPECT_EQ(meeting.sums_made(1), 1);
}

}  // namespace
}  // namespace hiq
