// The simulator end to end at a small size: the scheduler, the radix cache, the
// transfer engine and the codecs on real bytes, with the simulated model
// checking every cached token it reads.
#include <gtest/gtest.h>

#include "engine/simulation.h"
#include "kv/model_config.h"

namespace hiq {
namespace {

SimulationConfig small_config(CodecKind codec, bool hicache) {
  SimulationConfig c;
  c.geometry = *geometry_from_config_json(
      R"({"model_type": "qwen3", "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 32})",
      "small");
  c.max_total_tokens = 400;  // about five prompts: the working set does not fit
  c.hicache = hicache;
  c.host.codec = codec;
  c.host.size_bytes = 400 * c.geometry.l1_bytes_per_token() * 3;  // BF16 L2 of 3× L1
  c.max_concurrency = 4;
  return c;
}

std::vector<Request> small_workload() {
  SharedPrefixWorkload w;
  w.num_groups = 8;
  w.prompts_per_group = 4;
  w.system_prompt_len = 64;
  w.question_len = 8;
  w.output_len = 4;
  w.vocab_size = 1000;
  return *w.generate();
}

TEST(Simulation, EveryRequestServedAndEveryCachedReadChecked) {
  for (CodecKind codec : kAllCodecs) {
    SCOPED_TRACE(std::string(codec_name(codec)));
    auto report = run_simulation(small_config(codec, true), small_workload());
    ASSERT_TRUE(report.is_ok()) << report.status().to_string();
    EXPECT_EQ(report->requests, 32u);
    EXPECT_EQ(report->rejected, 0u);
    EXPECT_EQ(report->output_tokens, 32u * 4);
    EXPECT_GT(report->hit_rate, 0.0);
    EXPECT_NEAR(report->hit_rate, report->hit_rate_device + report->hit_rate_host, 1e-12);
    // Every cached prompt token was checked, row by row, when its prefill read it.
    EXPECT_EQ(report->verified_tokens, report->cached_l1_tokens + report->cached_l2_tokens);
    EXPECT_GT(report->ttft_p99, 0.0);
    EXPECT_GE(report->ttft_p99, report->ttft_p50);
  }
}

TEST(Simulation, HostTierRaisesHitRateAndSmallerCodecsHoldMore) {
  auto none = run_simulation(small_config(CodecKind::kBf16, false), small_workload());
  auto bf16 = run_simulation(small_config(CodecKind::kBf16, true), small_workload());
  auto int4 = run_simulation(small_config(CodecKind::kInt4, true), small_workload());
  ASSERT_TRUE(none.is_ok() && bf16.is_ok() && int4.is_ok());
  EXPECT_EQ(none->hit_rate_host, 0.0);
  EXPECT_GT(bf16->hit_rate, none->hit_rate);
  EXPECT_GT(bf16->restored_tokens, 0u);
  // 2 heads × 32 in int4: 32 B of codes + 4 B of scales → 48 B records against 128 B.
  EXPECT_EQ(int4->l2_capacity_tokens * 48, bf16->l2_capacity_tokens * 128);
  EXPECT_GE(int4->hit_rate, bf16->hit_rate);
  // Measured from real traffic, the encoded bytes per token are the layout's.
  EXPECT_DOUBLE_EQ(bf16->l2_bytes_per_token, 4.0 * 2 * 2 * 32 * 2);
}

TEST(Simulation, RequestThatCanNeverFitIsRejectedWithAReason) {
  SimulationConfig c = small_config(CodecKind::kInt8, true);
  c.max_total_tokens = 40;  // smaller than one prompt
  auto report = run_simulation(c, small_workload());
  ASSERT_TRUE(report.is_ok());
  EXPECT_EQ(report->rejected, 32u);
}

}  // namespace
}  // namespace hiq

namespace hiq {
namespace {

TEST(Simulation, MultiTurnReusesEveryEarlierRound) {
  SimulationConfig c = small_config(CodecKind::kInt8, true);
  c.max_total_tokens = 256;
  c.host.size_bytes = 0;
  c.host.ratio = 16;  // room for every conversation in L2
  MultiTurnWorkload w;
  w.num_clients = 6;
  w.num_rounds = 3;
  w.request_length = 40;
  w.output_length = 6;
  w.vocab_size = 500;
  auto source = make_multi_turn_source(w);
  ASSERT_TRUE(source.is_ok());
  auto report = run_simulation(c, **source);
  ASSERT_TRUE(report.is_ok()) << report.status().to_string();
  EXPECT_EQ(report->requests, 18u);
  EXPECT_EQ(report->rejected, 0u);
  // Round r's prompt is the conversation so far plus 40 tokens; all of it but
  // the last answer token is cached: 0 + 45 + 91 of 40 + 86 + 132 per client.
  EXPECT_EQ(report->prompt_tokens, 6u * (40 + 86 + 132));
  EXPECT_EQ(report->cached_l1_tokens + report->cached_l2_tokens, 6u * (45 + 91));
  EXPECT_GT(report->restored_tokens, 0u);
}

}  // namespace
}  // namespace hiq

namespace hiq {
namespace {

// Restores and backups that fail are recomputed or skipped: every request is
// still served, and the simulated model (which checks every cached read) never
// sees wrong KV.
TEST(Simulation, FailedTransfersAreRecomputedNeverServed) {
  SimulationConfig c = small_config(CodecKind::kInt8, true);
  c.transfer_fault = [](Ticket ticket, TransferKind kind, int layer) {
    if (ticket % 3 == 0 && layer == 2) return data_loss(std::string("injected ") + std::string(transfer_kind_name(kind)) + " fault");
    return Status::ok();
  };
  auto report = run_simulation(c, small_workload());
  ASSERT_TRUE(report.is_ok()) << report.status().to_string();
  EXPECT_EQ(report->rejected, 0u);
  EXPECT_EQ(report->output_tokens, 32u * 4);
  EXPECT_GT(report->restore_failures, 0u);
  EXPECT_GT(report->backup_failures, 0u);
  // A batch sent back by a failed restore is checked again when it runs again.
  EXPECT_GE(report->verified_tokens, report->cached_l1_tokens + report->cached_l2_tokens);
}

}  // namespace
}  // namespace hiq

namespace hiq {
namespace {

// L1 holds two requests at a time and both are locked while they run: the
// others wait their turn instead of failing or evicting KV in use.
TEST(Simulation, FullL1WithEverythingLockedMakesRequestsWait) {
  SimulationConfig c = small_config(CodecKind::kInt8, true);
  c.max_total_tokens = 160;  // a request needs 72 + 3 slots
  c.max_concurrency = 6;
  auto report = run_simulation(c, small_workload());
  ASSERT_TRUE(report.is_ok()) << report.status().to_string();
  EXPECT_EQ(report->rejected, 0u);
  EXPECT_EQ(report->output_tokens, 32u * 4);
  EXPECT_GT(report->l1_evicted_tokens, 0u);
}

}  // namespace
}  // namespace hiq

namespace hiq {
namespace {

TEST(Simulation, SameFlagsGiveTheSameReport) {
  auto a = run_simulation(small_config(CodecKind::kInt4H, true), small_workload());
  auto b = run_simulation(small_config(CodecKind::kInt4H, true), small_workload());
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(a->cached_l1_tokens, b->cached_l1_tokens);
  EXPECT_EQ(a->cached_l2_tokens, b->cached_l2_tokens);
  EXPECT_EQ(a->restored_tokens, b->restored_tokens);
  EXPECT_EQ(a->l1_evicted_tokens, b->l1_evicted_tokens);
  EXPECT_EQ(a->ttft_mean, b->ttft_mean);
  EXPECT_EQ(a->virtual_seconds, b->virtual_seconds);
}

}  // namespace
}  // namespace hiq
