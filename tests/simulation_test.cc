// The simulator end to end at a small size: the scheduler, the radix cache, the
// transfer engine and the codecs on real bytes, with the simulated model
// checking every cached row it reads.
#include <gtest/gtest.h>

#include "cuda/device.h"
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

std::vector<Request> small_workload(int groups = 8, int prompts_per_group = 4) {
  SharedPrefixWorkload w;
  w.num_groups = groups;
  w.prompts_per_group = prompts_per_group;
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

// An L2 that holds the working set in int4h but not in int8: the ladder
// int8 → int4h demotes instead of dropping, so it hits as often as int4h
// and more than int8, restores from the demoted rung, and every restored
// row is checked against its rung's round trip.
TEST(Simulation, TieredHostTierHitsAsTheSmallestRungAndServesEveryRungChecked) {
  const auto run = [](const char* codec) {
    SimulationConfig c = small_config(CodecKind::kInt8, true);
    EXPECT_TRUE(parse_host_codec(codec, c.host).is_ok());
    c.host.size_bytes = 400 * c.geometry.l1_bytes_per_token();  // BF16 L2 of 1× L1
    c.verify_every_read = true;
    auto report = run_simulation(c, small_workload(12));
    EXPECT_TRUE(report.is_ok()) << report.status().to_string();
    return report.is_ok() ? *report : SimulationReport{};
  };
  const SimulationReport int8 = run("int8"), int4h = run("int4h"), tiered = run("tiered:int8,int4h");
  EXPECT_EQ(tiered.verified_tokens, tiered.cached_l1_tokens + tiered.cached_l2_tokens);
  EXPECT_EQ(tiered.restore_failures, 0u);
  ASSERT_EQ(tiered.restored_rung_tokens.size(), 2u);
  EXPECT_EQ(tiered.restored_rung_tokens[0] + tiered.restored_rung_tokens[1], tiered.restored_tokens);
  EXPECT_GT(tiered.restored_rung_tokens[1], 0u);
  EXPECT_GT(tiered.demoted_rung_tokens[1], 0u);
  EXPECT_GT(int4h.hit_rate, int8.hit_rate) << "the case must separate the codecs";
  EXPECT_GT(tiered.hit_rate, int8.hit_rate);
  EXPECT_GE(tiered.hit_rate, int4h.hit_rate);
  EXPECT_EQ(run("tiered:int8,int4h").demoted_rung_tokens, tiered.demoted_rung_tokens) << "not deterministic";
}

// Three rungs on a geometry whose granule (192 B) is smaller than an int8
// record (528 B): records are addressed by granule, not by record. The
// simulator demotes inline, so two runs make the same decisions.
TEST(Simulation, ThreeRungsAddressedByGranuleServeEveryReadCheckedAndRepeat) {
  SimulationConfig c;
  c.geometry = *geometry_from_config_json(
      R"({"model_type": "qwen3", "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 4,
          "head_dim": 128})",
      "granule");
  c.max_total_tokens = 600;
  ASSERT_TRUE(parse_host_codec("tiered:bf16,int8,int4h", c.host).is_ok());
  c.host.size_bytes = 600 * c.geometry.l1_bytes_per_token();
  c.max_concurrency = 6;
  c.verify_every_read = true;
  SharedPrefixWorkload w;
  w.num_groups = 10;
  w.prompts_per_group = 4;
  w.system_prompt_len = 120;
  w.question_len = 16;
  w.output_len = 4;
  w.vocab_size = 5000;
  const std::vector<Request> requests = *w.generate();
  auto first = run_simulation(c, requests);
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  auto second = run_simulation(c, requests);
  ASSERT_TRUE(second.is_ok()) << second.status().to_string();
  EXPECT_EQ(first->verified_tokens, first->cached_l1_tokens + first->cached_l2_tokens);
  EXPECT_GT(first->demoted_rung_tokens[2], 0u);
  EXPECT_GT(first->restored_rung_tokens[2], 0u);
  EXPECT_EQ(first->hit_rate, second->hit_rate);
  EXPECT_EQ(first->restored_rung_tokens, second->restored_rung_tokens);
  EXPECT_EQ(first->demoted_rung_tokens, second->demoted_rung_tokens);
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
  // Two requests fit at once, six clients send: the rest queued for L1 room,
  // and the scheduler counted it.
  const SchedulerStats& q = report->scheduler;
  EXPECT_GT(q.admission_waits, 0u);
  EXPECT_EQ(q.admitted, 32u);
  EXPECT_GT(q.queue_seconds, 0.0);
  EXPECT_GE(q.prefill_steps, 32u / 2);
  EXPECT_LE(q.prefill_steps, 32u);
  EXPECT_GE(q.decode_steps, 3u * 32 / 2);  // 4 tokens each: 3 decode steps, at most two requests a step
  EXPECT_GT(q.prefill_seconds, 0.0);
  EXPECT_GT(q.decode_seconds, 0.0);
}

// Eight prompts of one group arrive together. The first computes the shared
// prefix alone (the others would compute it again: deferred); once it is in
// the tree the other seven reuse it, so they share one prefill step, and the
// budget counts only their new tokens (8 each, not 72).
TEST(Simulation, RequestsReusingACachedPrefixShareAPrefillStep) {
  SimulationConfig c = small_config(CodecKind::kBf16, false);
  c.max_total_tokens = 4000;
  c.max_concurrency = 8;
  c.scheduler.max_prefill_tokens = 80;  // one whole prompt (72 tokens), or ten questions
  auto report = run_simulation(c, small_workload(/*groups=*/1, /*prompts_per_group=*/8));
  ASSERT_TRUE(report.is_ok()) << report.status().to_string();
  EXPECT_EQ(report->scheduler.admitted, 8u);
  EXPECT_EQ(report->scheduler.prefill_steps, 2u);
  EXPECT_EQ(report->cached_l1_tokens, 7u * 64);
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

namespace hiq {
namespace {

// SimRunner alone, on an L1 pool without L2: a prefill writes every row of a
// sequence, and the tests corrupt chosen rows through write_rows.
struct RunnerFixture {
  explicit RunnerFixture(const std::string& config_json, size_t tokens) {
    geometry = *geometry_from_config_json(config_json, "runner");
    l1 = *make_host_memory_device_pool(geometry, tokens + 1);
    for (size_t i = 0; i < tokens + 1; ++i) {
      sequence.push_back(static_cast<TokenId>(i * 31 % 997));
      slots.push_back(static_cast<SlotId>(i));
    }
  }
  // The first `n` tokens, all computed (first_new 0) or read back (first_new n).
  ForwardItem prefill(size_t n, size_t first_new) const {
    ForwardItem item;
    item.tokens = std::span(sequence).first(n);
    item.slots = std::span(slots).first(n);
    item.first_new = first_new;
    return item;
  }
  // Overwrites row index `row` (layer row / 2, K or V) of `slot` with zeros.
  void corrupt(SlotId slot, int row) {
    const auto part = static_cast<KvPart>(row % geometry.rows_per_layer());
    const std::vector<uint16_t> zeros(l1->row_elements(part), 0);
    ASSERT_TRUE(l1->write_rows(row / geometry.rows_per_layer(), part, std::span(&slot, 1), zeros.data()).is_ok());
  }
  KvGeometry geometry;
  std::unique_ptr<DeviceKvPool> l1;
  std::vector<TokenId> sequence;
  std::vector<SlotId> slots;
};

constexpr const char* kFourLayers =
    R"({"model_type": "qwen3", "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 32})";

// A decode step checks every row of every context token. It used to check one
// row index per token, a different one each step (index 0 on the first):
// this wrong V row of layer 2 went unseen on that step. Now both the default
// check (each row's first values) and verify_every_decode_row (every byte)
// catch it on the first decode step, naming the same row.
TEST(SimRunner, DecodeCatchesAWrongRowOfAnyLayerOnTheFirstStep) {
  for (bool every_byte : {false, true}) {
    SCOPED_TRACE(every_byte ? "every byte" : "default");
    RunnerFixture f(kFourLayers, 10);
    SimRunnerOptions options;
    options.verify_every_decode_row = every_byte;
    SimRunner runner(*f.l1, nullptr, nullptr, options);
    const ForwardItem prefill = f.prefill(10, 0);
    ASSERT_TRUE(runner.forward(std::span(&prefill, 1)).is_ok());
    ForwardItem decode = f.prefill(11, 10);
    decode.decode = true;
    ASSERT_TRUE(runner.forward(std::span(&decode, 1)).is_ok());
    EXPECT_EQ(runner.stats().verified_rows, 10u * 8);  // every row of every context token
    EXPECT_EQ(runner.stats().sampled_rows, every_byte ? 0u : 10u * 8);
    f.corrupt(f.slots[3], 5);  // layer 2 V
    auto step = runner.forward(std::span(&decode, 1));
    ASSERT_FALSE(step.is_ok());
    EXPECT_EQ(step.status().code(), StatusCode::kInternal);
    EXPECT_EQ(step.status().message(), "simulated model read wrong KV: token 3 in slot 3, layer 2 V");
    EXPECT_EQ(runner.stats().verified_rows, 10u * 8 + 3 * 8 + 6);  // tokens 0..2 whole, token 3 up to its wrong row
  }
}

// The virtual clock: a step costs what the cost model says of its batch. By
// default a prefill its new tokens at one rate and a decode step a fixed time;
// the batch-dependent terms add each prefill's causal (new token, context
// token) pairs and each decode step's context tokens.
TEST(SimRunner, AStepCostsWhatTheCostModelSaysOfItsBatch) {
  for (bool batch : {false, true}) {
    SCOPED_TRACE(batch ? "batch-dependent" : "constant");
    RunnerFixture f(kFourLayers, 10);
    SimRunnerOptions options;
    options.cost.prefill_tokens_per_s = 1000;
    options.cost.decode_step_s = 0.5;
    if (batch) {
      options.cost.prefill_pair_s = 0.01;
      options.cost.decode_context_token_s = 0.1;
    }
    SimRunner runner(*f.l1, nullptr, nullptr, options);
    // 6 tokens after 4 cached: new tokens at positions 4 … 9 attend to 5 … 10 tokens, 45 pairs.
    const ForwardItem first = f.prefill(4, 0);
    ASSERT_TRUE(runner.forward(std::span(&first, 1)).is_ok());
    const double after_first = runner.now();
    EXPECT_DOUBLE_EQ(after_first, 4 / 1000.0 + (batch ? 10 * 0.01 : 0));  // 1 + 2 + 3 + 4 pairs
    const ForwardItem rest = f.prefill(10, 4);
    ASSERT_TRUE(runner.forward(std::span(&rest, 1)).is_ok());
    EXPECT_DOUBLE_EQ(runner.now() - after_first, 6 / 1000.0 + (batch ? 45 * 0.01 : 0));
    // A decode step of two requests: 11 and 10 context tokens.
    ForwardItem a = f.prefill(11, 10), b = f.prefill(10, 9);
    a.decode = b.decode = true;
    const std::vector<ForwardItem> step = {a, b};
    const double before = runner.now();
    ASSERT_TRUE(runner.forward(step).is_ok());
    EXPECT_DOUBLE_EQ(runner.now() - before, 0.5 + (batch ? 21 * 0.1 : 0));
  }
}

// The H200-fitted batch-dependent model keeps the constant model's reference
// point: a decode step of 8 requests at 2,048 tokens of context, and a fresh
// 2,112-token prompt at 38,000 tokens/s.
TEST(SimCostModel, BatchDependentKeepsTheReferencePoint) {
  const SimCostModel constant, batch = SimCostModel::batch_dependent();
  EXPECT_NEAR(batch.decode_step_s + 8 * 2048 * batch.decode_context_token_s, constant.decode_step_s, 1e-12);
  const double n = 2112, pairs = n * (n + 1) / 2;
  EXPECT_NEAR(n / batch.prefill_tokens_per_s + pairs * batch.prefill_pair_s, n / constant.prefill_tokens_per_s, 1e-12);
  EXPECT_GT(batch.prefill_pair_s, 0);
  EXPECT_GT(batch.decode_context_token_s, 0);
  EXPECT_GT(batch.decode_step_s, 0);
  EXPECT_EQ(constant.prefill_pair_s, 0);
  EXPECT_EQ(constant.decode_context_token_s, 0);
}

// The default decode check reads each row's first values only: damage past
// them (here the last value of a row) is the price of reading one cache line
// per row instead of the whole row, and verify_every_decode_row catches it.
// (A prefill compares every byte: it catches it too.)
TEST(SimRunner, DecodeSampleSeesTheRowStartAndEveryByteModeTheRest) {
  for (bool every_byte : {false, true}) {
    SCOPED_TRACE(every_byte ? "every byte" : "default");
    RunnerFixture f(kFourLayers, 10);
    SimRunnerOptions options;
    options.verify_every_decode_row = every_byte;
    SimRunner runner(*f.l1, nullptr, nullptr, options);
    const ForwardItem prefill = f.prefill(10, 0);
    ASSERT_TRUE(runner.forward(std::span(&prefill, 1)).is_ok());
    const SlotId slot = f.slots[6];
    std::vector<uint16_t> row(f.l1->row_elements(KvPart::kK));
    ASSERT_TRUE(f.l1->read_rows(1, KvPart::kK, std::span(&slot, 1), row.data()).is_ok());
    row.back() ^= 0x4000;
    ASSERT_TRUE(f.l1->write_rows(1, KvPart::kK, std::span(&slot, 1), row.data()).is_ok());
    ForwardItem decode = f.prefill(11, 10);
    decode.decode = true;
    auto step = runner.forward(std::span(&decode, 1));
    if (!every_byte) {
      EXPECT_TRUE(step.is_ok()) << step.status().to_string();
    } else {
      ASSERT_FALSE(step.is_ok());
      EXPECT_EQ(step.status().message(), "simulated model read wrong KV: token 6 in slot 6, layer 1 K");
    }
    const ForwardItem reread = f.prefill(10, 10);  // a prefill reading the same tokens
    auto again = runner.forward(std::span(&reread, 1));
    ASSERT_FALSE(again.is_ok());
    EXPECT_EQ(again.status().message(), "simulated model read wrong KV: token 6 in slot 6, layer 1 K");
  }
}

// Requests of one step that share a prefix read the same slots: those are
// checked once for the step, and a wrong shared row fails the step, naming the
// first request's token.
TEST(SimRunner, DecodeChecksASharedPrefixOncePerStep) {
  RunnerFixture f(kFourLayers, 12);
  SimRunner runner(*f.l1, nullptr, nullptr);
  const ForwardItem prefill = f.prefill(10, 0);
  ASSERT_TRUE(runner.forward(std::span(&prefill, 1)).is_ok());
  // Two requests: tokens 0..9 shared, then each its own token in slot 10 or 11.
  std::vector<TokenId> other(f.sequence.begin(), f.sequence.begin() + 11);
  other[10] = 5;
  std::vector<SlotId> other_slots(f.slots.begin(), f.slots.begin() + 10);
  other_slots.push_back(f.slots[11]);
  ForwardItem first = f.prefill(11, 10), second;
  second.tokens = other;
  second.slots = other_slots;
  second.first_new = 10;
  first.decode = second.decode = true;
  const ForwardItem batch[] = {first, second};
  ASSERT_TRUE(runner.forward(batch).is_ok());
  EXPECT_EQ(runner.stats().verified_rows, 10u * 8);  // the shared ten tokens, once
  f.corrupt(f.slots[8], 2);  // layer 1 K
  auto step = runner.forward(batch);
  ASSERT_FALSE(step.is_ok());
  EXPECT_EQ(step.status().message(), "simulated model read wrong KV: token 8 in slot 8, layer 1 K");
}

// Rows are read in batches of many tokens per (layer, part), yet the error
// names the first wrong row in token order, as a token-by-token scan would —
// across batch boundaries too (2 KiB rows: several batches of tokens here).
TEST(SimRunner, PrefillNamesTheFirstWrongRowInTokenOrder) {
  RunnerFixture f(R"({"model_type": "qwen3", "num_hidden_layers": 3, "num_attention_heads": 8,
                      "num_key_value_heads": 8, "head_dim": 128})",
                  1500);
  SimRunner runner(*f.l1, nullptr, nullptr);
  const ForwardItem compute = f.prefill(1500, 0);
  ASSERT_TRUE(runner.forward(std::span(&compute, 1)).is_ok());
  EXPECT_EQ(runner.stats().computed_tokens, 1500u);
  const ForwardItem read = f.prefill(1500, 1499);
  ASSERT_TRUE(runner.forward(std::span(&read, 1)).is_ok());
  EXPECT_EQ(runner.stats().verified_tokens, 1499u);
  EXPECT_EQ(runner.stats().verified_rows, 1499u * 6);
  // Batches of 512 tokens: [0, 512), [512, 1024), [1024, 1499).
  f.corrupt(f.slots[1200], 0);  // a later batch
  f.corrupt(f.slots[1000], 3);  // the batch of the first error, an earlier row
  f.corrupt(f.slots[700], 5);   // an earlier token: this one is named,
  f.corrupt(f.slots[700], 4);   // and of its rows, the first
  auto failed = runner.forward(std::span(&read, 1));
  ASSERT_FALSE(failed.is_ok());
  EXPECT_EQ(failed.status().message(), "simulated model read wrong KV: token 700 in slot 700, layer 2 K");
  EXPECT_EQ(runner.stats().verified_tokens, 1499u + 700);
  EXPECT_EQ(runner.stats().verified_rows, 1499u * 6 + 700 * 6 + 5);
}

// Without a GPU (or without the CUDA backend in this build) a CUDA simulation
// is refused with a reason, not a crash. (With a GPU, gpu_simulation_test.cc
// checks that it makes exactly the CPU backend's decisions.)
TEST(Simulation, CudaBackendWithoutAGpuFailsWithAReason) {
  if (auto gpus = cuda::query_gpus(); gpus.is_ok() && !gpus->empty())
    GTEST_SKIP() << "a GPU is present: gpu_simulation_test.cc runs the CUDA backend";
  for (bool hicache : {true, false}) {
    SCOPED_TRACE(hicache ? "L1 and L2" : "L1 only");
    SimulationConfig c = small_config(CodecKind::kInt8, hicache);
    c.backend = SimBackend::kCuda;
    c.verify_every_read = true;
    auto report = run_simulation(c, small_workload());
    ASSERT_FALSE(report.is_ok());
    EXPECT_EQ(report.status().code(), StatusCode::kUnavailable) << report.status().to_string();
    EXPECT_NE(report.status().message().find("--device cuda"), std::string::npos) << report.status().message();
  }
}

TEST(Simulation, BackendNamesRoundTrip) {
  for (SimBackend b : {SimBackend::kCpu, SimBackend::kCuda}) EXPECT_EQ(*parse_sim_backend(sim_backend_name(b)), b);
  const auto bogus = parse_sim_backend("bogus");
  EXPECT_EQ(bogus.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bogus.status().message().find("cpu, cuda"), std::string::npos);
}

// verify_every_read changes what is checked, not what happens.
TEST(Simulation, VerifyEveryReadGivesTheSameReport) {
  SimulationConfig c = small_config(CodecKind::kInt8, true);
  auto a = run_simulation(c, small_workload());
  c.verify_every_read = true;
  auto b = run_simulation(c, small_workload());
  ASSERT_TRUE(a.is_ok() && b.is_ok()) << a.status().to_string() << b.status().to_string();
  EXPECT_EQ(a->cached_l2_tokens, b->cached_l2_tokens);
  EXPECT_EQ(a->verified_tokens, b->verified_tokens);
  EXPECT_EQ(a->virtual_seconds, b->virtual_seconds);
}

}  // namespace
}  // namespace hiq

namespace hiq {
namespace {

// The configuration checks itself, naming the field (the CLI names the flag).
TEST(SimulationConfig, ValidateNamesTheField) {
  SimulationConfig c;
  c.geometry.page_size = 16;
  EXPECT_TRUE(c.validate().is_ok());
  c.max_total_tokens = 8;
  EXPECT_EQ(c.validate().message(), "max_total_tokens must hold at least one page (16 tokens), got 8");
  c = {};
  c.max_concurrency = 0;
  EXPECT_EQ(c.validate().message(), "max_concurrency must be positive");
  c = {};
  c.cost.decode_step_s = 0;
  EXPECT_EQ(c.validate().code(), StatusCode::kInvalidArgument);
  c = {};
  c.cost.prefill_pair_s = -1e-9;
  EXPECT_EQ(c.validate().message(), "cost must have batch-dependent terms of zero or more");
  c = {};
  c.transfer_workers = 0;
  EXPECT_EQ(c.validate().message(), "transfer_workers must be in [1, 256]");
}

// Closed-loop clients without a delay all send at 0 and, with equal outputs,
// finish together and send again together: every prefill step takes a whole
// cohort. With a seeded random delay before each request they fall out of
// step, so prefill steps are more and smaller; the run stays deterministic,
// every request is served, and a TTFT counts from the request's own arrival.
TEST(Simulation, ClientDelaysBreakTheLockstepOfClosedLoopClients) {
  SimulationConfig c = small_config(CodecKind::kInt8, true);
  c.max_concurrency = 6;
  SharedPrefixWorkload w;
  w.num_groups = 4;
  w.prompts_per_group = 6;
  w.system_prompt_len = 64;
  w.question_len = 16;
  w.output_len = 12;
  w.vocab_size = 1000;
  auto lockstep = run_simulation(c, *w.generate());
  c.client_delay_max_s = 0.05;  // several decode steps
  auto jittered = run_simulation(c, *w.generate());
  auto again = run_simulation(c, *w.generate());
  ASSERT_TRUE(lockstep.is_ok() && jittered.is_ok() && again.is_ok());
  EXPECT_EQ(jittered->rejected, 0u);
  EXPECT_EQ(jittered->output_tokens, lockstep->output_tokens);
  EXPECT_GT(jittered->scheduler.prefill_steps, lockstep->scheduler.prefill_steps);
  EXPECT_GT(jittered->ttft_p50, 0);
  EXPECT_EQ(jittered->scheduler.prefill_steps, again->scheduler.prefill_steps);
  EXPECT_EQ(jittered->ttft_mean, again->ttft_mean);
  c.client_delay_max_s = -1;
  EXPECT_EQ(run_simulation(c, *w.generate()).status().message(), "client_delay_max_s must be zero or more");
}

// Long prompts beside decoding requests: without chunked prefill a decode
// waits for whole prompts (the longest gap between two tokens of a request
// is several prefills); in chunks of 256 it waits at most one chunk. The
// same tokens are served either way, and the virtual clock makes it exact.
TEST(Simulation, ChunkedPrefillBoundsTheGapBetweenTokens) {
  SimulationConfig c = small_config(CodecKind::kInt8, true);
  c.max_total_tokens = 8192;
  c.scheduler.max_prefill_tokens = 2000;  // one prompt a step: the first request waits for the other three
  SharedPrefixWorkload w;
  w.num_groups = 12;
  w.prompts_per_group = 1;
  w.system_prompt_len = 1500;
  w.question_len = 8;
  w.output_len = 24;
  w.vocab_size = 1000;
  c.scheduler.chunked_prefill_size = 0;
  auto whole = run_simulation(c, *w.generate());
  c.scheduler.chunked_prefill_size = 256;
  auto chunked = run_simulation(c, *w.generate());
  ASSERT_TRUE(whole.is_ok() && chunked.is_ok());
  EXPECT_EQ(whole->scheduler.prefill_chunks, 0u);
  EXPECT_EQ(chunked->scheduler.prefill_chunks, 12u * 5);  // 1,507 computed tokens: 5 chunks of 256, then the rest
  EXPECT_EQ(chunked->output_tokens, whole->output_tokens);
  EXPECT_EQ(chunked->rejected, 0u);
  const double chunk_s = 256 / c.cost.prefill_tokens_per_s, decode_s = c.cost.decode_step_s;
  EXPECT_LE(chunked->itl_max, chunk_s + 2 * decode_s + 1e-9);
  EXPECT_GT(whole->itl_max, 2 * 1500 / c.cost.prefill_tokens_per_s);
}

}  // namespace
}  // namespace hiq
