// The real (CPU) model behind the scheduler and the hierarchical cache: with a
// BF16 host tier the greedy output of every request is exactly what the model
// generates alone, from scratch — prefixes reused from L1 or restored from L2
// change nothing — and restores really happened. Through INT8 the run
// completes and restores, and most outputs still agree.
#include <gtest/gtest.h>

#include "cache/radix_cache.h"
#include "engine/cpu_model_runner.h"
#include "engine/scheduler.h"
#include "tiny_model.h"
#include "transfer/transfer_engine.h"

namespace hiq {
namespace {

using testing::TinyModel;


// 6 groups × 3 prompts: a shared prefix of 40 tokens and a question of 6,
// different in each pass.
std::vector<Request> requests(int pass) {
  std::vector<Request> out;
  uint64_t id = 0;
  for (int g = 0; g < 6; ++g)
    for (int p = 0; p < 3; ++p) {
      Request r;
      r.id = id++;
      r.group = g;
      for (int i = 0; i < 40; ++i) r.prompt.push_back(static_cast<TokenId>((g * 31 + i * 7) % 97));
      for (int i = 0; i < 6; ++i) r.prompt.push_back(static_cast<TokenId>((p * 13 + i * 5 + pass * 29 + 50) % 97));
      r.max_new_tokens = 4;
      out.push_back(std::move(r));
    }
  return out;
}

struct ServedRun {
  std::vector<RequestResult> results;
  RadixCacheStats cache;
};

// Groups in order, then the same groups again: the second pass finds the
// prefixes evicted from a small L1 and restores them from L2.
ServedRun serve(const TinyModel& m, CodecKind codec) {
  auto l1 = m.pool(160);
  HostKvPoolOptions ho;
  ho.codec = codec;
  ho.ratio = 4;
  auto l2 = HostKvPool::create(l1->geometry(), ho, l1->num_slots());
  EXPECT_TRUE(l2.is_ok());
  auto engine = make_cpu_transfer_engine(*l1, **l2);
  EXPECT_TRUE(engine.is_ok());
  CpuModelRunner runner(m.shape, m.weights, *l1, engine->get());
  ServedRun run;
  {
    RadixCache cache(*l1, l2->get(), engine->get());
    Scheduler scheduler(cache, *l1, engine->get(), runner);
    for (int pass = 0; pass < 2; ++pass)
      for (Request r : requests(pass)) {
        r.id += static_cast<uint64_t>(pass) * 1000;
        scheduler.submit(std::move(r), runner.now());
        // One request at a time keeps L1 small enough to evict between groups.
        while (true) {
          auto busy = scheduler.step();
          EXPECT_TRUE(busy.is_ok()) << busy.status().to_string();
          cache.drain_transfers();
          if (!busy.is_ok() || !*busy) break;
        }
        for (RequestResult& res : scheduler.take_finished()) run.results.push_back(std::move(res));
      }
    run.cache = cache.stats();
  }
  return run;
}

TEST(CpuModelRunner, Bf16HostTierGivesExactlyTheOutputOfRunningAlone) {
  TinyModel m;
  const ServedRun run = serve(m, CodecKind::kBf16);
  ASSERT_EQ(run.results.size(), 36u);
  size_t restored = 0;
  for (const RequestResult& r : run.results) {
    ASSERT_TRUE(r.status.is_ok()) << r.status.to_string();
    EXPECT_EQ(r.output, m.generate_alone(r.request.prompt, 4)) << "request " << r.id;
    restored += r.cached_l2_tokens;
  }
  EXPECT_GT(restored, 0u) << "the second pass must restore prefixes from L2; cache: l1 hits " << run.cache.hit_tokens_l1
                          << ", l2 hits " << run.cache.hit_tokens_l2 << ", backups " << run.cache.backup_tokens
                          << ", evicted to host " << run.cache.l1_evicted_to_host_tokens << ", dropped "
                          << run.cache.l1_dropped_tokens << ", loaded back " << run.cache.load_back_tokens;
  EXPECT_GT(run.cache.hit_tokens_l1, 0u);
}

TEST(CpuModelRunner, Int8HostTierRestoresAndMostlyAgrees) {
  TinyModel m;
  const ServedRun run = serve(m, CodecKind::kInt8);
  ASSERT_EQ(run.results.size(), 36u);
  size_t restored = 0, same = 0;
  for (const RequestResult& r : run.results) {
    ASSERT_TRUE(r.status.is_ok());
    restored += r.cached_l2_tokens;
    same += r.output == m.generate_alone(r.request.prompt, 4);
  }
  EXPECT_GT(restored, 0u);
  EXPECT_GE(same, 30u) << "int8 KV should rarely change a greedy token of this model";
}

}  // namespace
}  // namespace hiq
