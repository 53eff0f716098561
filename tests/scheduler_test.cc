// The scheduler on small, hand-made cases: what an admission may change when
// it fails, and how requests that finish together hand their L1 to the next
// admission. The simulated model checks every cached row it reads.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <string>

#include "engine/scheduler.h"
#include "engine/sim_runner.h"
#include "kv/model_config.h"

namespace hiq {
namespace {

// Every output token counted at admission: no over-commit, no retraction.
SchedulerOptions exact_outputs() {
  SchedulerOptions o;
  o.new_token_ratio = o.min_new_token_ratio = 1;
  return o;
}

struct SchedulerHarness {
  SchedulerHarness(size_t l1_slots, bool host_tier, SchedulerOptions options = exact_outputs()) {
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
    EXPECT_EQ(h.cache->cached_prefix(cached.prompt).l1, 10u);

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

// A request's output slots are counted at admission, not taken: cached KV
// stays in L1 until a decode step needs its slot. Here R may generate 60
// tokens, which would need the 30 slots of the cached prefix X, but stops
// (is cancelled) after 4: X is never evicted.
TEST(Scheduler, OutputSlotsAreTakenOnlyAsDecodeNeedsThem) {
  SchedulerHarness h(80, /*host_tier=*/false);
  const Request x = SchedulerHarness::request(1, 1000, 30, 1);
  h.scheduler->submit(x, 0);
  ASSERT_EQ(h.run_to_end().size(), 1u);
  h.scheduler->submit(SchedulerHarness::request(2, 2000, 10, 60), 0);  // 10 + 59 slots: 50 free + X's 30
  for (int i = 0; i < 4; ++i) h.step();
  EXPECT_EQ(h.scheduler->running(), 1u);
  EXPECT_EQ(h.cache->cached_prefix(x.prompt).l1, 30u);
  EXPECT_EQ(h.l1->allocator().used_count(), 30u + 10 + 3) << "X, R's prompt and its 3 decode steps' tokens";
  // Another request that needs X's slots too waits: R's outputs still to come are counted.
  h.scheduler->submit(SchedulerHarness::request(3, 3000, 20, 1), 0);  // 20 ≤ 80 - 43 free + 30, not + R's 56
  h.step();
  EXPECT_EQ(h.scheduler->waiting(), 1u);
  ASSERT_TRUE(h.scheduler->cancel(2));
  const std::vector<RequestResult> done = h.run_to_end();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].finish_reason, FinishReason::kCancelled);
  EXPECT_TRUE(done[1].status.is_ok()) << done[1].status.to_string();
  EXPECT_EQ(h.cache->stats().l1_dropped_tokens, 0u) << "nothing needed X's slots";
}

// Decode takes its slots from cached KV when nothing is free (evicting
// least recently used first), and every request still completes.
TEST(Scheduler, DecodeEvictsCachedKvForItsSlots) {
  SchedulerHarness h(60, /*host_tier=*/true);
  const Request x = SchedulerHarness::request(1, 1000, 30, 1);
  h.scheduler->submit(x, 0);
  ASSERT_EQ(h.run_to_end().size(), 1u);
  h.scheduler->submit(SchedulerHarness::request(2, 2000, 20, 30), 0);  // 20 + 29 of 30 free + 30 cached
  const std::vector<RequestResult> done = h.run_to_end();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].status.is_ok()) << done[0].status.to_string();
  EXPECT_EQ(done[0].output.size(), 30u);
  EXPECT_EQ(h.cache->stats().l1_evicted_to_host_tokens, 30u) << "X, one node, went to the host tier whole";
  EXPECT_EQ(h.cache->cached_prefix(x.prompt).host, 30u);
}

// The prefix P (32 tokens) that the LPM cases share.
std::vector<TokenId> shared_prefix() {
  std::vector<TokenId> prefix(32);
  std::iota(prefix.begin(), prefix.end(), 500);
  return prefix;
}

// A prompt sharing a running request's prefix (P + 8 tokens).
Request sharing(uint64_t id, TokenId first) {
  const std::vector<TokenId> prefix = shared_prefix();
  Request r = SchedulerHarness::request(id, first, 8, 2);
  r.prompt.insert(r.prompt.begin(), prefix.begin(), prefix.end());
  return r;
}

// The LPM cases' start, in an L1 of 100: A (P + 8, 20 outputs) is prefilled
// and holds 59 slots.
void run_a_sharing_prefix(SchedulerHarness& h) {
  Request a = sharing(1, 1000);
  a.max_new_tokens = 20;
  h.scheduler->submit(a, 0);
  h.step();
}

// Then B (45 tokens, nothing cached) needs 46 of the 41 slots left, and C
// (P + 8) needs 9; both arrive, B first, and one step runs.
void submit_b_then_c(SchedulerHarness& h) {
  h.scheduler->submit(SchedulerHarness::request(2, 2000, 45, 2), 0);
  h.scheduler->submit(sharing(3, 3000), 0);
  h.step();
}

// L1 of 100: A (prefix P of 32 + 8, 20 outputs) holds 59 slots. B (45
// tokens, nothing cached) needs 46 of the 41 left and waits; C, sharing P
// with A, needs 9. FCFS keeps C behind B; LPM admits C beside A.
TEST(Scheduler, LongestPrefixMatchAdmitsTheRequestThatSharesARunningPrefix) {
  for (SchedulePolicy policy : {SchedulePolicy::kFcfs, SchedulePolicy::kLpm}) {
    SCOPED_TRACE(std::string(schedule_policy_name(policy)));
    SchedulerOptions o = exact_outputs();
    o.policy = policy;
    SchedulerHarness h(100, /*host_tier=*/false, o);
    run_a_sharing_prefix(h);
    submit_b_then_c(h);
    EXPECT_EQ(h.scheduler->running(), policy == SchedulePolicy::kLpm ? 2u : 1u);
    const std::vector<RequestResult> done = h.run_to_end();
    ASSERT_EQ(done.size(), 3u);
    for (const RequestResult& r : done) {
      EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
      EXPECT_EQ(r.cached_l1_tokens, r.request.id == 3 ? 32u : 0u) << r.request.id;
    }
    // LPM admitted C first: it finished before B.
    const bool c_before_b = std::find_if(done.begin(), done.end(), [](auto& r) { return r.request.id == 3; }) <
                            std::find_if(done.begin(), done.end(), [](auto& r) { return r.request.id == 2; });
    EXPECT_EQ(c_before_b, policy == SchedulePolicy::kLpm);
  }
}

// The same, then D (sharing P) arrives. B has been overtaken once (by C):
// with max_overtakes 1 it now goes first and, not fitting, holds D back too;
// with the default bound D overtakes it as C did.
TEST(Scheduler, LongestPrefixMatchBoundsHowOftenARequestIsOvertaken) {
  for (size_t bound : {size_t{1}, SchedulerOptions{}.max_overtakes}) {
    SCOPED_TRACE("max_overtakes " + std::to_string(bound));
    SchedulerOptions o = exact_outputs();
    o.policy = SchedulePolicy::kLpm;
    o.max_overtakes = bound;
    SchedulerHarness h(100, /*host_tier=*/false, o);
    run_a_sharing_prefix(h);
    submit_b_then_c(h);
    ASSERT_EQ(h.scheduler->running(), 2u);
    h.scheduler->submit(sharing(4, 4000), 0);
    h.step();
    EXPECT_EQ(h.scheduler->running(), bound == 1 ? 2u : 3u);
    EXPECT_EQ(h.scheduler->waiting(), bound == 1 ? 2u : 1u);
    const std::vector<RequestResult> done = h.run_to_end();
    ASSERT_EQ(done.size(), 4u);
    const auto admitted = [&](uint64_t id) {
      return std::find_if(done.begin(), done.end(), [&](auto& r) { return r.request.id == id; })->admitted;
    };
    if (bound == 1) {
      EXPECT_LE(admitted(2), admitted(4));
    } else {
      EXPECT_LT(admitted(4), admitted(2));
    }
  }
}

// LPM matches only the 128 oldest waiting requests a step (matching walks
// the prompt): behind 127 requests that do not fit, C is matched and
// overtakes them; behind 128, it is not, and waits its turn.
TEST(Scheduler, LongestPrefixMatchLooksAtTheOldest128Waiting) {
  for (size_t fillers : {size_t{127}, size_t{128}}) {
    SCOPED_TRACE(std::to_string(fillers) + " waiting ahead");
    SchedulerOptions o = exact_outputs();
    o.policy = SchedulePolicy::kLpm;
    SchedulerHarness h(100, /*host_tier=*/false, o);
    run_a_sharing_prefix(h);
    for (size_t i = 0; i < fillers; ++i)
      h.scheduler->submit(SchedulerHarness::request(10 + i, TokenId(2000 + 100 * i), 45, 2), 0);
    h.scheduler->submit(sharing(3, 900), 0);
    h.step();
    EXPECT_EQ(h.scheduler->running(), fillers < 128 ? 2u : 1u);
  }
}

TEST(SchedulePolicyNames, ParseSglangSpellings) {
  EXPECT_EQ(*parse_schedule_policy("fcfs"), SchedulePolicy::kFcfs);
  EXPECT_EQ(*parse_schedule_policy("lpm"), SchedulePolicy::kLpm);
  auto bad = parse_schedule_policy("dfs-weight");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("'dfs-weight' is not one of fcfs, lpm"), std::string::npos);
}

// Over-commit: admission counts a fraction of the outputs to come, so decode
// runs out of L1 and retracts requests, which resume from the cache. Every
// request still generates exactly what it would have alone (the simulated
// model's next token is a function of the whole sequence, and every cached
// row it reads is checked), with a host tier or without.
TEST(Scheduler, RetractedRequestsResumeFromTheCacheAndGenerateTheSameTokens) {
  std::vector<Request> requests;
  for (uint64_t i = 0; i < 12; ++i) requests.push_back(SchedulerHarness::request(i + 1, TokenId(1000 * (i + 1)), 24, 40));
  std::map<uint64_t, std::vector<TokenId>> alone;
  {
    SchedulerHarness h(4096, /*host_tier=*/false);
    for (const Request& r : requests) h.scheduler->submit(r, 0);
    for (RequestResult& r : h.run_to_end()) alone[r.id] = r.output;
    ASSERT_EQ(alone.size(), requests.size());
  }
  for (bool host_tier : {false, true}) {
    SCOPED_TRACE(host_tier ? "host tier" : "no host tier");
    SchedulerOptions o;  // the default over-commit: 0.7, decaying
    SchedulerHarness h(256, host_tier, o);  // 4 of 63 tokens each fit, counting every output
    for (const Request& r : requests) h.scheduler->submit(r, 0);
    const std::vector<RequestResult> done = h.run_to_end();
    ASSERT_EQ(done.size(), requests.size());
    for (const RequestResult& r : done) {
      EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
      EXPECT_EQ(r.output, alone[r.id]) << "request " << r.id;
      EXPECT_EQ(r.cached_l1_tokens + r.cached_l2_tokens, 0u) << "its own KV is not a cache hit";
    }
    EXPECT_GT(h.scheduler->stats().retractions, 0u);
    EXPECT_EQ(h.scheduler->stats().admitted, requests.size());
    EXPECT_EQ(h.l1->allocator().used_count(), h.cache->l1_tokens()) << "nothing but the tree holds L1";
  }
}

// A request that may generate to the end of the context (a chat request
// without max_tokens) counts at most clip_max_new_tokens_estimation outputs
// at admission: two run at once instead of one after the other, and when
// they outgrow L1 one is retracted and resumes, with the same tokens.
TEST(Scheduler, AnOutputEstimateIsClipped) {
  const Request a = SchedulerHarness::request(1, 1000, 10, 300), b = SchedulerHarness::request(2, 2000, 10, 300);
  std::map<uint64_t, std::vector<TokenId>> alone;
  for (const Request& r : {a, b}) {
    SchedulerHarness h(512, /*host_tier=*/false);
    h.scheduler->submit(r, 0);
    alone[r.id] = h.run_to_end().at(0).output;
  }
  for (size_t clip : {size_t{4096}, size_t{64}}) {
    SCOPED_TRACE("clip " + std::to_string(clip));
    SchedulerOptions o = exact_outputs();
    o.clip_max_new_tokens_estimation = clip;
    SchedulerHarness h(512, /*host_tier=*/true, o);
    h.scheduler->submit(a, 0);
    h.scheduler->submit(b, 0);
    h.step();
    EXPECT_EQ(h.scheduler->running(), clip == 64 ? 2u : 1u);
    const std::vector<RequestResult> done = h.run_to_end();
    ASSERT_EQ(done.size(), 2u);
    for (const RequestResult& r : done) EXPECT_EQ(r.output, alone[r.id]) << "request " << r.id;
    EXPECT_EQ(h.scheduler->stats().retractions > 0, clip == 64) << "309 + 309 slots do not fit in 512";
  }
}

TEST(SchedulerOptions, ValidateNamesTheField) {
  SchedulerOptions o;
  EXPECT_TRUE(o.validate().is_ok());
  o.min_new_token_ratio = 0.8;  // above new_token_ratio
  EXPECT_NE(o.validate().message().find("min_new_token_ratio"), std::string::npos);
  o = SchedulerOptions{};
  o.new_token_ratio = 1.5;
  EXPECT_FALSE(o.validate().is_ok());
  o = SchedulerOptions{};
  o.max_prefill_tokens = 0;
  EXPECT_NE(o.validate().message().find("max_prefill_tokens"), std::string::npos);
}

// Chunked prefill: B's 64-token prompt goes 16 tokens a step, and its chunks
// alternate with the decode steps of A, which is running: A gains a token
// between any two of B's chunks. Both generate what they would alone.
TEST(Scheduler, ChunkedPrefillAlternatesWithDecode) {
  const Request a = SchedulerHarness::request(1, 1000, 8, 12);
  const Request b = SchedulerHarness::request(2, 2000, 64, 4);
  std::map<uint64_t, std::vector<TokenId>> alone;
  for (const Request& r : {a, b}) {
    SchedulerHarness h(256, /*host_tier=*/false);
    h.scheduler->submit(r, 0);
    alone[r.id] = h.run_to_end().at(0).output;
  }
  for (bool host_tier : {false, true}) {
    SCOPED_TRACE(host_tier ? "host tier" : "no host tier");
    SchedulerOptions o = exact_outputs();
    o.chunked_prefill_size = 16;
    SchedulerHarness h(256, host_tier, o);
    h.scheduler->submit(a, 0);
    h.step();  // A's prefill
    h.scheduler->submit(b, 0);
    std::vector<uint64_t> chunks_at_decode;  // B's chunks so far, at each of A's tokens
    std::vector<RequestResult> done;
    for (int i = 0; i < 100 && (h.scheduler->waiting() > 0 || h.scheduler->running() > 0); ++i) {
      const uint64_t decodes = h.scheduler->stats().decode_steps;
      for (RequestResult& r : h.step()) done.push_back(std::move(r));
      if (h.scheduler->stats().decode_steps > decodes) chunks_at_decode.push_back(h.scheduler->stats().prefill_chunks);
    }
    EXPECT_EQ(h.scheduler->stats().prefill_chunks, 3u) << "63 computed tokens: 3 chunks of 16, then 15";
    ASSERT_GE(chunks_at_decode.size(), 3u);
    EXPECT_EQ(std::vector<uint64_t>(chunks_at_decode.begin(), chunks_at_decode.begin() + 3),
              (std::vector<uint64_t>{1, 2, 3})) << "a decode step after each chunk";
    ASSERT_EQ(done.size(), 2u);
    for (const RequestResult& r : done) {
      EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
      EXPECT_EQ(r.output, alone[r.id]) << "request " << r.id;
    }
    EXPECT_EQ(h.l1->allocator().used_count(), h.cache->l1_tokens());
  }
}

// A request cancelled between chunks ends with what it computed in the cache.
TEST(Scheduler, CancelBetweenChunksKeepsTheComputedPart) {
  SchedulerOptions o = exact_outputs();
  o.chunked_prefill_size = 16;
  SchedulerHarness h(256, /*host_tier=*/false, o);
  const Request b = SchedulerHarness::request(2, 2000, 64, 4);
  h.scheduler->submit(b, 0);
  h.step();
  h.step();
  EXPECT_EQ(h.scheduler->stats().prefill_chunks, 2u);
  EXPECT_EQ(h.scheduler->running(), 1u);
  ASSERT_TRUE(h.scheduler->cancel(2));
  const std::vector<RequestResult> done = h.run_to_end();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].finish_reason, FinishReason::kCancelled);
  EXPECT_TRUE(done[0].output.empty());
  EXPECT_EQ(h.cache->cached_prefix(b.prompt).l1, 32u);
  EXPECT_EQ(h.l1->allocator().used_count(), 32u);
}

}  // namespace
}  // namespace hiq
