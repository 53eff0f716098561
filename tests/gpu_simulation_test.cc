// The whole stack on the GPU backend: scheduler, radix cache, CUDA transfer
// engine and GPU codecs, with the simulated model checking every row of every
// cached token on every read (prefill and decode). The runs are deterministic,
// so the GPU backend must make exactly the CPU backend's decisions. Skips
// without a GPU.
#include <gtest/gtest.h>

#include <cstdio>

#include "cuda/device.h"
#include "gpu_test_policy.h"
#include "engine/simulation.h"
#include "kv/model_config.h"

namespace hiq {
namespace {

SimulationConfig config(SimBackend backend, CodecKind codec) {
  SimulationConfig c;
  c.backend = backend;
  c.geometry = *geometry_from_config_json(
      R"({"model_type": "qwen3", "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 4,
          "head_dim": 128})",
      "gpu-sim");
  c.max_total_tokens = 1200;  // the working set does not fit: evictions, backups and restores
  c.host.codec = codec;
  c.host.size_bytes = 1200 * c.geometry.l1_bytes_per_token() * 3;  // BF16 L2 of 3× L1
  c.max_concurrency = 6;
  c.verify_every_read = true;
  return c;
}

std::vector<Request> workload() {
  SharedPrefixWorkload w;
  w.num_groups = 12;
  w.prompts_per_group = 4;
  w.system_prompt_len = 200;
  w.question_len = 16;
  w.output_len = 6;
  w.vocab_size = 5000;
  return *w.generate();
}

class GpuSimulation : public ::testing::TestWithParam<CodecKind> {
 protected:
  void SetUp() override {
    HIQ_SKIP_OR_FAIL_WITHOUT_GPU();
  }
};

TEST_P(GpuSimulation, EveryReadCheckedAndTheSameDecisionsAsTheCpuBackend) {
  auto gpu = run_simulation(config(SimBackend::kCuda, GetParam()), workload());
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
  auto cpu = run_simulation(config(SimBackend::kCpu, GetParam()), workload());
  ASSERT_TRUE(cpu.is_ok()) << cpu.status().to_string();
  EXPECT_EQ(gpu->rejected, 0u);
  EXPECT_GT(gpu->restored_tokens, 0u) << "the run must restore from L2 to test anything";
  EXPECT_GT(gpu->backup_tokens, 0u);
  EXPECT_EQ(gpu->restore_failures + gpu->backup_failures, 0u);
  EXPECT_EQ(gpu->verified_tokens, gpu->cached_l1_tokens + gpu->cached_l2_tokens);
  EXPECT_EQ(gpu->hit_rate, cpu->hit_rate);
  EXPECT_EQ(gpu->cached_l2_tokens, cpu->cached_l2_tokens);
  EXPECT_EQ(gpu->restored_tokens, cpu->restored_tokens);
  EXPECT_EQ(gpu->backup_tokens, cpu->backup_tokens);
  EXPECT_EQ(gpu->l2_bytes_per_token, cpu->l2_bytes_per_token);
  EXPECT_EQ(gpu->ttft_p50, cpu->ttft_p50);
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, GpuSimulation, ::testing::ValuesIn(kAllCodecs),
                         [](const ::testing::TestParamInfo<CodecKind>& p) { return std::string(codec_name(p.param)); });

// A precision-tiered L2 too small for the working set: nodes are demoted
// (int8 → int4h, or bf16 → int8 → int4h) on the GPU, and restored from the
// rungs they reached; the GPU decodes each slot with its rung's codec. The
// CPU backend demotes with the CPU codecs: the same decisions and every
// restored row checked mean the GPU's demoted records are the CPU's.
TEST(GpuSimulationTiered, RestoresFromEveryRungAreRightAndAsTheCpuBackendDecides) {
  HIQ_SKIP_OR_FAIL_WITHOUT_GPU();
  for (const char* spec : {"tiered:int8,int4h", "tiered:bf16,int8,int4h"}) {
    SCOPED_TRACE(spec);
    const auto make = [&](SimBackend backend) {
      SimulationConfig c = config(backend, CodecKind::kInt8);
      EXPECT_TRUE(parse_host_codec(spec, c.host).is_ok());
      c.host.size_bytes = 1200 * c.geometry.l1_bytes_per_token();  // BF16 L2 of 1× L1
      return c;
    };
    auto gpu = run_simulation(make(SimBackend::kCuda), workload());
    ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
    auto cpu = run_simulation(make(SimBackend::kCpu), workload());
    ASSERT_TRUE(cpu.is_ok()) << cpu.status().to_string();
    EXPECT_EQ(gpu->restore_failures + gpu->backup_failures, 0u);
    EXPECT_EQ(gpu->verified_tokens, gpu->cached_l1_tokens + gpu->cached_l2_tokens);
    ASSERT_GE(gpu->restored_rung_tokens.size(), 2u);
    EXPECT_GT(gpu->restored_rung_tokens.back(), 0u) << "nothing restored from the last rung";
    for (size_t rung = 0; rung < gpu->restored_rung_tokens.size(); ++rung)
      std::printf("%s: restored from rung %zu: %llu tokens\n", spec, rung,
                  static_cast<unsigned long long>(gpu->restored_rung_tokens[rung]));
    EXPECT_EQ(gpu->hit_rate, cpu->hit_rate);
    EXPECT_EQ(gpu->restored_rung_tokens, cpu->restored_rung_tokens);
    EXPECT_EQ(gpu->demoted_rung_tokens, cpu->demoted_rung_tokens);
    EXPECT_GT(gpu->gpu_demotion_jobs, 0u) << "nothing was demoted on the GPU";
    EXPECT_EQ(gpu->gpu_demotion_failed_jobs, 0u);
    EXPECT_EQ(cpu->gpu_demotion_jobs, 0u);
  }
}

TEST(GpuSimulationFaults, FailedRestoresAreRecomputedNeverServed) {
  HIQ_SKIP_OR_FAIL_WITHOUT_GPU();
  SimulationConfig c = config(SimBackend::kCuda, CodecKind::kInt8);
  int loads = 0;
  c.transfer_fault = [&loads](Ticket, TransferKind kind, int layer) {
    // Every third load fails at layer 3, after layers 0-2 were queued.
    return kind == TransferKind::kLoad && layer == 3 && ++loads % 3 == 0 ? unavailable("injected") : Status::ok();
  };
  auto report = run_simulation(c, workload());
  ASSERT_TRUE(report.is_ok()) << report.status().to_string();
  EXPECT_GT(report->restore_failures, 0u);
  EXPECT_GT(report->restored_tokens, 0u);
  EXPECT_EQ(report->rejected, 0u);
  // A failed batch is run again, and its cached tokens checked again.
  EXPECT_GE(report->verified_tokens, report->cached_l1_tokens + report->cached_l2_tokens);
}

}  // namespace
}  // namespace hiq
