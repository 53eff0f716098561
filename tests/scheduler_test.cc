// The scheduler on small, hand-made cases: what an admission may change when
// it fails, and how requests that finish together hand their L1 to the next
// admission. The simulated model checks every cached row it reads.
#include <gtest/gtest.h>

#include <numeric>

#include "engine/scheduler.h"
#include "engine/sim_runner.h"
#include "kv/model_config.h"

namespace hiq {
namespace {

struct SchedulerHarness {
  SchedulerHarness(size_t l1_slots, bool host_tier, SchedulerOptions options = {}) {
    GeometryOptions go;
    go.page_size = 1;
    geometry = *geometry_from_config_json(
        R"({"model_type": "qwen3", "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
            "head_dim": 16})",
        "tiny", go);
    l1 = *make_host_memory_device_pool(geometry, l1_slots);
    if (host_tier) {
      HostKvPoolOptions ho;
      ho.codec = CodecKind::kInt8;
      ho.ratio = 4;
      l2 = *HostKvPool::create(geometry, ho, l1_slots);
      engine = *make_cpu_transfer_engine(*l1, *l2, TransferEngineOptions{});
    }
    cache = std::make_unique<RadixCache>(*l1, l2.get(), engine.get());
    runner = std::make_unique<SimRunner>(*l1, l2.get(), engine.get());
    scheduler = std::make_unique<Scheduler>(*cache, *l1, engine.get(), *runner, options);
  }
  ~SchedulerHarness() {
    scheduler.reset();
    cache.reset();  // drains its transfers before the engine goes
  }

  // Distinct tokens from `first`, so that no two requests share a prefix by accident.
  static Request request(uint64_t id, TokenId first, size_t prompt, int max_new_tokens) {
    Request r;
    r.id = id;
    r.prompt.resize(prompt);
    std::iota(r.prompt.begin(), r.prompt.end(), first);
    r.max_new_tokens = max_new_tokens;
    return r;
  }
  // One scheduler step, then the simulator's end-of-step: backups settle.
  std::vector<RequestResult> step() {
    auto busy = scheduler->step();
    EXPECT_TRUE(busy.is_ok()) << busy.status().to_string();
    cache->drain_transfers();
    EXPECT_TRUE(cache->check_invariants().is_ok()) << cache->check_invariants().to_string();
    return scheduler->take_finished();
  }
  std::vector<RequestResult> run_to_end() {
    std::vector<RequestResult> done;
    for (int i = 0; i < 1000 && (scheduler->waiting() > 0 || scheduler->running() > 0); ++i)
      for (RequestResult& r : step()) done.push_back(std::move(r));
    return done;
  }

  KvGeometry geometry;
  std::unique_ptr<DeviceKvPool> l1;
  std::unique_ptr<HostKvPool> l2;
  std::unique_ptr<TransferEngine> engine;
  std::unique_ptr<RadixCache> cache;
  std::unique_ptr<SimRunner> runner;
  std::unique_ptr<Scheduler> scheduler;
};

// A request that cannot have its slots now waits, and its failed admission
// changes nothing: the cached KV it would have evicted stays in L1 (and,
// without a host tier, in the cache at all).
TEST(Scheduler, AFailedAdmissionEvictsNothing) {
  for (bool host_tier : {false, true}) {
    SCOPED_TRACE(host_tier ? "host tier" : "no host tier");
    SchedulerHarness h(40, host_tier);
    const Request cached = SchedulerHarness::request(1, 1000, 10, 1);
    h.scheduler->submit(cached, 0);
    ASSERT_EQ(h.run_to_end().size(), 1u);
    ASSERT_EQ(h.cache->l1_tokens(), 10u);

    h.scheduler->submit(SchedulerHarness::request(2, 2000, 20, 10), 0);  // 29 slots of the 30 free
    h.step();
    ASSERT_EQ(h.scheduler->running(), 1u);
    h.scheduler->submit(SchedulerHarness::request(3, 3000, 15, 5), 0);  // 19 slots: 1 free + 10 cached
    h.step();
    EXPECT_EQ(h.scheduler->waiting(), 1u);
    EXPECT_EQ(h.scheduler->stats().admission_waits, 1u);
    EXPECT_EQ(h.cache->stats().l1_evicted_to_host_tokens + h.cache->stats().l1_dropped_tokens, 0u);
    EXPECT_EQ(h.cache->cached_prefix_tokens(cached.prompt), 10u);

    const std::vector<RequestResult> done = h.run_to_end();
    ASSERT_EQ(done.size(), 2u);
    for (const RequestResult& r : done) EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
  }
}

// Two requests admitted together finish in the same step; finish() inserts
// their outputs, whose backups are then in flight and pin the requests' whole
// paths in L1. The queued request needs those slots: it waits for the short
// backups and is admitted in that same step, instead of failing an admission
// with nothing running (which used to cost a step and regroup the batch).
TEST(Scheduler, RequestsFinishingTogetherHandTheirL1ToTheNextAdmission) {
  SchedulerHarness h(40, /*host_tier=*/true);
  h.scheduler->submit(SchedulerHarness::request(1, 1000, 12, 4), 0);  // 15 slots each
  h.scheduler->submit(SchedulerHarness::request(2, 2000, 12, 4), 0);
  h.step();
  ASSERT_EQ(h.scheduler->running(), 2u);
  h.scheduler->submit(SchedulerHarness::request(3, 3000, 30, 1), 0);  // 30 slots: 10 free + their 30
  std::vector<RequestResult> done;
  while (done.empty()) done = h.step();
  EXPECT_EQ(done.size(), 2u) << "both finish in one step";
  EXPECT_EQ(h.scheduler->running(), 1u) << "the queued request is admitted in the step that freed its slots";
  EXPECT_EQ(h.scheduler->waiting(), 0u);
  EXPECT_EQ(h.scheduler->stats().transfer_drains, 0u);
  EXPECT_GE(h.cache->stats().l1_eviction_waits, 1u);
  EXPECT_LE(h.cache->stats().l1_eviction_wait_tokens, 2u * 15) << "it waited for nothing but their transfers";
  done = h.run_to_end();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].status.is_ok()) << done[0].status.to_string();
}

}  // namespace
}  // namespace hiq
