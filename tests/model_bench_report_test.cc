// `hiq bench model`'s host half (model/model_bench.h): the FLOPs its
// component rates divide by, and the JSON that scripts/runtime-reference
// reads. The measurements themselves need a GPU (scripts/gpu-check).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/model_bench.h"
#include "tiny_model.h"

namespace hiq {
namespace {

using testing::qwen3_8b_shape;

TEST(ModelBenchReport, LayerGemmFlopsCountEveryProjectionOfEveryLayer) {
  // Per layer: QKV 4096 → 4096 + 2·1024, O 4096 → 4096, gate|up 4096 → 2·12288, down 12288 → 4096.
  const double weights = 4096.0 * 6144 + 4096.0 * 4096 + 4096.0 * 24576 + 12288.0 * 4096;
  EXPECT_DOUBLE_EQ(layer_gemm_flops(qwen3_8b_shape(), 1), 2 * weights * 36);
  EXPECT_DOUBLE_EQ(layer_gemm_flops(qwen3_8b_shape(), 2048), 2048 * layer_gemm_flops(qwen3_8b_shape(), 1));
}

TEST(ModelBenchReport, AttentionFlopsCountTheVisibleTokensOfEachQuery) {
  const ModelShape s = qwen3_8b_shape();
  const double per_pair = 4.0 * 128 * 32 * 36;  // Q·Kᵀ and P·V, every query head, every layer
  // A fresh prompt: the causal triangle with its diagonal, T(T + 1)/2 pairs.
  EXPECT_DOUBLE_EQ(attention_flops(s, 2048, 2048), per_pair * 2048 * 2049 / 2);
  // One decode token at a 2,049-token context sees all of it.
  EXPECT_DOUBLE_EQ(attention_flops(s, 1, 2049), per_pair * 2049);
  // 100 new tokens on 200 cached: they see 201 … 300 tokens.
  EXPECT_DOUBLE_EQ(attention_flops(s, 100, 300), per_pair * (201 + 300) * 100 / 2);
}

TEST(ModelBenchReport, JsonCarriesEachComponentWithItsRate) {
  ModelBenchReport r;
  r.gpu = "test GPU";
  ModelBenchReport::Components c;
  c.seconds.gemm_seconds = 0.040;
  c.seconds.attention_seconds = 0.005;
  c.seconds.norm_elementwise_seconds = 0.003;
  c.seconds.lm_head_seconds = 0.001;
  c.seconds.other_seconds = 0.0005;
  c.gemm_flops = 3.2e13;
  c.attention_flops = 2.5e12;
  r.prefill.push_back({2048, 0.050, c});
  ModelBenchReport::Decode d;
  d.batch = 8;
  d.context = 2048;
  d.step_seconds = d.graph_step_seconds = 0.007;
  d.eager_step_seconds = 0.009;
  d.components = c;
  r.decode.push_back(d);
  r.cuda_graphs = true;
  r.graphs.captured = 2;
  r.graphs.replayed = 40;

  const nlohmann::json j = nlohmann::json::parse(to_json(r));
  EXPECT_EQ(j["gpu"], "test GPU");
  for (const nlohmann::json& row : {j["prefill"][0], j["decode"][0]}) {
    const nlohmann::json& got = row["components"];
    EXPECT_DOUBLE_EQ(got["gemm_s"].get<double>(), 0.040);
    EXPECT_DOUBLE_EQ(got["attention_s"].get<double>(), 0.005);
    EXPECT_DOUBLE_EQ(got["norm_elementwise_s"].get<double>(), 0.003);
    EXPECT_DOUBLE_EQ(got["lm_head_s"].get<double>(), 0.001);
    EXPECT_DOUBLE_EQ(got["other_s"].get<double>(), 0.0005);
    EXPECT_DOUBLE_EQ(got["total_s"].get<double>(), 0.0495);
    EXPECT_DOUBLE_EQ(got["gemm_tflops"].get<double>(), 800);      // 3.2e13 / 0.040 s
    EXPECT_DOUBLE_EQ(got["attention_tflops"].get<double>(), 500);  // 2.5e12 / 0.005 s
  }
  EXPECT_DOUBLE_EQ(j["prefill"][0]["tokens_per_s"].get<double>(), 2048 / 0.050);
  EXPECT_EQ(j["decode"][0]["batch"], 8);
  EXPECT_DOUBLE_EQ(j["decode"][0]["step_seconds"].get<double>(), 0.007);
  EXPECT_DOUBLE_EQ(j["decode"][0]["graph_step_seconds"].get<double>(), 0.007);
  EXPECT_DOUBLE_EQ(j["decode"][0]["eager_step_seconds"].get<double>(), 0.009);
  EXPECT_EQ(j["cuda_graphs"]["enabled"], true);
  EXPECT_EQ(j["cuda_graphs"]["captured"], 2);
  EXPECT_EQ(j["cuda_graphs"]["replayed"], 40);
  EXPECT_EQ(j["cuda_graphs"]["capture_failures"], 0);
  EXPECT_TRUE(j["restore"].is_array());
}

TEST(ModelBenchReport, JsonWithGraphsOffHasTheEagerStepOnly) {
  ModelBenchReport r;
  ModelBenchReport::Decode d;
  d.batch = 1;
  d.step_seconds = d.eager_step_seconds = 0.006;
  r.decode.push_back(d);
  const nlohmann::json j = nlohmann::json::parse(to_json(r));
  EXPECT_EQ(j["cuda_graphs"]["enabled"], false);
  EXPECT_TRUE(j["decode"][0]["graph_step_seconds"].is_null());
  EXPECT_DOUBLE_EQ(j["decode"][0]["step_seconds"].get<double>(), 0.006);
}

// `hiq bench model --tp-size N`: each row against one GPU, and the
// collective alone as nccl-tests reports it (bus bandwidth 2(N − 1)/N of
// the algorithm's).
TEST(TpBenchReport, JsonCarriesTheSpeedupAndTheCollectivesBandwidths) {
  TpBenchReport r;
  r.tp_size = 4;
  r.collective = TpCollective::kNccl;
  r.devices = {0, 1, 2, 3};
  r.gpus = {"a", "b", "c", "d"};
  TpBenchReport::Row prefill;
  prefill.tokens = 2048;
  prefill.seconds = 0.020;
  prefill.one_gpu_seconds = 0.060;
  prefill.all_reduce_bytes = 2048 * 5120 * 2;
  prefill.all_reduce_seconds = 1e-4;
  prefill.all_reduces = 128;
  TpBenchReport::Row decode;
  decode.decode = true;
  decode.tokens = 8;
  decode.context = 2048;
  decode.seconds = 0.010;
  decode.all_reduce_bytes = 8 * 5120 * 2;
  decode.all_reduce_seconds = 2e-5;
  decode.all_reduces = 128;
  r.rows = {prefill, decode};
  r.one_gpu_note = "";
  const nlohmann::json j = nlohmann::json::parse(to_json(r));
  EXPECT_EQ(j["collective"], "nccl");
  EXPECT_EQ(j["devices"].size(), 4u);
  const auto& p = j["rows"][0];
  EXPECT_EQ(p["kind"], "prefill");
  EXPECT_DOUBLE_EQ(p["speedup"].get<double>(), 3.0);
  const double algbw = 2048.0 * 5120 * 2 / 1e-4;
  EXPECT_DOUBLE_EQ(p["all_reduce"]["algbw_bytes_per_s"].get<double>(), algbw);
  EXPECT_DOUBLE_EQ(p["all_reduce"]["busbw_bytes_per_s"].get<double>(), algbw * 2 * 3 / 4);
  EXPECT_DOUBLE_EQ(p["all_reduce"]["share_of_pass"].get<double>(), 128 * 1e-4 / 0.020);
  // A model that did not fit one GPU has no reference: null, not zero.
  const auto& d = j["rows"][1];
  EXPECT_EQ(d["kind"], "decode");
  EXPECT_EQ(d["context"], 2048);
  EXPECT_TRUE(d["one_gpu_seconds"].is_null());
  EXPECT_TRUE(d["speedup"].is_null());
  EXPECT_TRUE(j["restore"].empty());

  // A restore row: each rank moves its share of the bytes.
  TpBenchReport::Restore x;
  x.codec = CodecKind::kInt8;
  x.tokens = 1920;
  x.seconds = 2e-3;
  x.bytes = 4000000;
  x.copy_seconds = 1e-3;
  r.restore = {x};
  const nlohmann::json k = nlohmann::json::parse(to_json(r));
  EXPECT_EQ(k["restore"][0]["codec"], "int8");
  EXPECT_DOUBLE_EQ(k["restore"][0]["per_rank_bytes_per_s"].get<double>(), 1e6 / 2e-3);
  EXPECT_DOUBLE_EQ(k["restore"][0]["copy_bytes_per_s"].get<double>(), 1e6 / 1e-3);
  EXPECT_DOUBLE_EQ(k["restore"][0]["ratio_to_copy"].get<double>(), 0.5);
}

}  // namespace
}  // namespace hiq
