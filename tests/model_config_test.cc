// Tests of model/model_config.h and model/weights.h: real Hugging Face configs
// of each architecture, RoPE scaling in both transformers formats, every
// feature we refuse, the KV geometry (checked against the kv module's parser),
// the tensors each architecture expects, and binding tiny checkpoints written
// by tests/safetensors_writer.h.
#include "expect_error.h"
#include "model/model_config.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/log.h"
#include "kv/model_config.h"
#include "model/checkpoint.h"
#include "model/weights.h"
#include "safetensors_writer.h"

namespace hiq {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;
using testing::WriterTensor;

using testing::contains;
using testing::expect_error;

void expect_config_error(std::string_view text, std::initializer_list<std::string_view> needles) {
  expect_error(model_config_from_json(text, "test/config.json"), StatusCode::kInvalidArgument, needles);
}

// config.json files as published on the Hugging Face Hub.
constexpr std::string_view kQwen3_8B = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 12288,
  "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
  "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

constexpr std::string_view kLlama31_8B = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
  "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
  "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";

constexpr std::string_view kQwen25_7B = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
  "intermediate_size": 18944, "max_position_embeddings": 32768, "max_window_layers": 28,
  "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 152064})";

constexpr std::string_view kMistral7B_v03 = R"({
  "architectures": ["MistralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
  "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.42.0.dev0", "use_cache": true, "vocab_size": 32768})";

// `base` with fields replaced or added (a null value removes the field).
std::string with(std::string_view base, const json& changes) {
  json config = json::parse(base);
  for (const auto& [key, value] : changes.items()) {
    if (value.is_null()) config.erase(key);
    else config[key] = value;
  }
  return config.dump();
}

Result<ModelConfig> parse(std::string_view text) { return model_config_from_json(text, "test/config.json"); }

// ---- real configs ------------------------------------------------------------------------

TEST(ModelConfig, ReadsQwen3_8B) {
  const auto c = parse(kQwen3_8B);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->architecture, ModelArchitecture::kQwen3);
  EXPECT_EQ(c->source, "test/config.json");
  EXPECT_EQ(c->vocab_size, 151936);
  EXPECT_EQ(c->hidden_size, 4096);
  EXPECT_EQ(c->intermediate_size, 12288);
  EXPECT_EQ(c->num_layers, 36);
  EXPECT_EQ(c->num_attention_heads, 32);
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->rope_scaling, RopeScaling{});
  EXPECT_EQ(c->max_position_embeddings, 40960);
  EXPECT_EQ(c->context_length(), 40960);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_FALSE(c->o_bias);
  EXPECT_EQ(c->torch_dtype, TensorDtype::kBf16);
  EXPECT_EQ(c->q_width(), 4096);
  EXPECT_EQ(c->kv_width(), 1024);
  EXPECT_TRUE(c->validate().is_ok());
}

TEST(ModelConfig, ReadsLlama31_8BWithLlama3Rope) {
  const auto c = parse(kLlama31_8B);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->architecture, ModelArchitecture::kLlama);
  EXPECT_EQ(c->head_dim, 128);  // hidden_size / num_attention_heads
  EXPECT_FALSE(c->qk_norm);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.kind, RopeScaling::Kind::kLlama3);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c->max_position_embeddings, 131072);
  EXPECT_EQ(c->context_length(), 131072);  // llama3's max_position_embeddings counts its factor already
}

TEST(ModelConfig, ReadsQwen25_7BWithItsFixedQkvBias) {
  const auto c = parse(kQwen25_7B);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->architecture, ModelArchitecture::kQwen2);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_TRUE(c->qkv_bias);  // sliding_window is set but use_sliding_window is false: accepted
  EXPECT_FALSE(c->o_bias);
  EXPECT_FALSE(c->qk_norm);
  // attention_bias does not change Qwen2 (transformers hard-wires its biases).
  const auto c2 = parse(with(kQwen25_7B, {{"attention_bias", false}}));
  ASSERT_TRUE(c2.is_ok());
  EXPECT_TRUE(c2->qkv_bias);
}

TEST(ModelConfig, ReadsMistral7B) {
  const auto c = parse(kMistral7B_v03);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->architecture, ModelArchitecture::kMistral);
  EXPECT_EQ(c->head_dim, 128);
  // transformers' Mistral has no biases, whatever attention_bias says.
  const auto biased = parse(with(kMistral7B_v03, {{"attention_bias", true}}));
  ASSERT_TRUE(biased.is_ok());
  EXPECT_FALSE(biased->qkv_bias);
  EXPECT_FALSE(biased->o_bias);
}

TEST(ModelConfig, AttentionBiasCoversQkvAndOForQwen3AndLlama) {
  for (std::string_view base : {kQwen3_8B, kLlama31_8B}) {
    const auto c = parse(with(base, {{"attention_bias", true}}));
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    EXPECT_TRUE(c->qkv_bias);
    EXPECT_TRUE(c->o_bias);
  }
}

TEST(ModelConfig, AppliesTransformersDefaults) {
  const auto c = parse(R"({"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
                           "num_hidden_layers": 2, "num_attention_heads": 4})");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->max_position_embeddings, 2048);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->torch_dtype, TensorDtype::kBf16);
}

TEST(ModelConfig, ReadsTheSavedDtype) {
  EXPECT_EQ(parse(with(kQwen3_8B, {{"torch_dtype", "float16"}}))->torch_dtype, TensorDtype::kF16);
  EXPECT_EQ(parse(with(kQwen3_8B, {{"torch_dtype", nullptr}, {"dtype", "float32"}}))->torch_dtype, TensorDtype::kF32);
  expect_config_error(with(kQwen3_8B, {{"torch_dtype", "int8"}}), {"test/config.json", "'torch_dtype'", "int8"});
}

// ---- RoPE scaling --------------------------------------------------------------------------

TEST(ModelConfig, ReadsYarnWithDefaults) {
  const auto c = parse(with(kQwen3_8B, {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0},
                                                           {"original_max_position_embeddings", 32768}}}}));
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  RopeScaling expected;
  expected.kind = RopeScaling::Kind::kYarn;
  expected.factor = 4.0;
  expected.original_max_position_embeddings = 32768;
  EXPECT_EQ(c->rope_scaling, expected);  // beta_fast 32, beta_slow 1, mscale and mscale_all_dim absent (0)
  EXPECT_EQ(c->context_length(), 131072);  // Qwen3's documented YaRN setting: 4 × 32,768
}

TEST(ModelConfig, ReadsEveryYarnParameterAndTheLegacyTypeKey) {
  const auto c = parse(with(kQwen3_8B, {{"rope_scaling", {{"type", "yarn"}, {"factor", 40}, {"beta_fast", 16},
                                                           {"beta_slow", 2}, {"mscale", 0.707},
                                                           {"mscale_all_dim", 0.707}, {"truncate", true}}}}));
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->rope_scaling.kind, RopeScaling::Kind::kYarn);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 40.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 0);  // the config's max_position_embeddings
  EXPECT_DOUBLE_EQ(c->rope_scaling.beta_fast, 16.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.beta_slow, 2.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.mscale, 0.707);
  EXPECT_DOUBLE_EQ(c->rope_scaling.mscale_all_dim, 0.707);
  EXPECT_EQ(c->context_length(), 40 * 40960);  // no original: the factor times max_position_embeddings
}

TEST(ModelConfig, ReadsTransformers5RopeParameters) {
  const auto c = parse(with(kLlama31_8B, {{"rope_theta", nullptr},
                                          {"rope_scaling", nullptr},
                                          {"rope_parameters", {{"rope_type", "llama3"}, {"rope_theta", 500000.0},
                                                               {"factor", 8.0}, {"low_freq_factor", 1.0},
                                                               {"high_freq_factor", 4.0},
                                                               {"original_max_position_embeddings", 8192}}}}));
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->rope_scaling, parse(kLlama31_8B)->rope_scaling);
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  const auto plain = parse(with(kQwen3_8B, {{"rope_theta", nullptr},
                                            {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 5e6}}}}));
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  EXPECT_EQ(plain->rope_scaling.kind, RopeScaling::Kind::kNone);
  EXPECT_DOUBLE_EQ(plain->rope_theta, 5e6);
}

TEST(ModelConfig, RefusesRopeScalingItCannotCompute) {
  for (const char* type : {"linear", "dynamic", "longrope", "su", "mrope"})
    expect_config_error(with(kQwen3_8B, {{"rope_scaling", {{"rope_type", type}, {"factor", 2.0}}}}),
                        {"test/config.json", "'rope_scaling.rope_type'", type});
  expect_config_error(with(kQwen3_8B, {{"rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}}}}),
                      {"'rope_scaling.rope_type'", "dynamic"});
  expect_config_error(with(kQwen3_8B, {{"rope_scaling", 2}}), {"'rope_scaling'", "object"});
  // A parameter we would otherwise ignore.
  expect_config_error(with(kQwen3_8B, {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0},
                                                         {"attention_factor", 0.5}}}}),
                      {"'rope_scaling.attention_factor'", "yarn"});
  expect_config_error(with(kQwen3_8B, {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0},
                                                         {"truncate", false}}}}),
                      {"'rope_scaling.truncate'"});
  expect_config_error(with(kQwen3_8B, {{"rope_scaling", {{"rope_type", "default"}, {"factor", 4.0}}}}),
                      {"'rope_scaling.factor'", "default"});
  expect_config_error(with(kQwen3_8B, {{"rope_scaling", {{"rope_type", "yarn"}, {"type", "llama3"},
                                                         {"factor", 4.0}}}}),
                      {"'rope_scaling.type'", "disagrees"});
  expect_config_error(with(kQwen3_8B, {{"rope_parameters", {{"rope_type", "default"},
                                                            {"partial_rotary_factor", 0.5}}}}),
                      {"'rope_parameters.partial_rotary_factor'"});
}

TEST(ModelConfig, RefusesIncompleteOrOutOfRangeScaling) {
  json llama3 = json::parse(kLlama31_8B)["rope_scaling"];
  for (const char* field : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
    json missing = llama3;
    missing.erase(field);
    expect_config_error(with(kLlama31_8B, {{"rope_scaling", missing}}),
                        {"test/config.json", "'rope_scaling." + std::string(field) + "'", "missing"});
  }
  json inverted = llama3;
  inverted["high_freq_factor"] = 0.5;
  expect_config_error(with(kLlama31_8B, {{"rope_scaling", inverted}}), {"'rope_scaling.high_freq_factor'"});
  expect_config_error(with(kQwen3_8B, {{"rope_scaling", {{"rope_type", "yarn"}}}}), {"'rope_scaling.factor'"});
  expect_config_error(with(kQwen3_8B, {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", -2.0}}}}),
                      {"'rope_scaling.factor'", "at least 1"});
  expect_config_error(with(kQwen3_8B, {{"rope_parameters", {{"rope_type", "yarn"}, {"factor", 0}}}}),
                      {"'rope_parameters.factor'", "at least 1"});
  // What the rotary tables need is refused with the file and the field, not
  // later by the table's own checks: a factor below 1, beta_fast ≤ beta_slow,
  // a base of 1 or less, a context past 2^31 positions.
  expect_config_error(with(kQwen3_8B, {{"rope_parameters", {{"rope_type", "yarn"}, {"factor", 0.5}}}}),
                      {"test/config.json", "'rope_parameters.factor'", "at least 1"});
  expect_config_error(
      with(kQwen3_8B, {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", 1}, {"beta_slow", 32}}}}),
      {"test/config.json", "'rope_scaling.beta_fast'", "above beta_slow"});
  json small = llama3;
  small["factor"] = 0.5;
  expect_config_error(with(kLlama31_8B, {{"rope_scaling", small}}), {"'rope_scaling.factor'", "at least 1"});
  expect_config_error(with(kQwen3_8B, {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 1e300}}}}),
                      {"test/config.json", "2^31 positions"});
  for (const double theta : {-1.0, 0.5, 1.0})
    expect_config_error(with(kQwen3_8B, {{"rope_theta", theta}}), {"test/config.json", "'rope_theta'", "above 1"});
  expect_config_error(with(kQwen3_8B, {{"rope_theta", "big"}}), {"'rope_theta'", "number"});
}

// ---- features we refuse ------------------------------------------------------------------

TEST(ModelConfig, RefusesOtherArchitectures) {
  for (const char* type : {"qwen3_moe", "qwen2_moe", "mixtral", "gpt2"})
    expect_config_error(with(kQwen3_8B, {{"model_type", type}}), {"test/config.json", "'model_type'", type});
  // A DeepSeek config parses (hiq layout sizes its cache) but is not served.
  expect_config_error(with(kQwen3_8B, {{"model_type", "deepseek_v3"}, {"kv_lora_rank", 512}, {"qk_rope_head_dim", 64}}),
                      {"test/config.json", "'model_type'", "deepseek_v3", "model runtime"});
  expect_config_error(with(kQwen3_8B, {{"model_type", nullptr}}), {"'model_type'", "missing"});
}

TEST(ModelConfig, RefusesSlidingWindows) {
  expect_config_error(with(kQwen3_8B, {{"use_sliding_window", true}, {"sliding_window", 4096}}),
                      {"test/config.json", "'use_sliding_window'"});
  expect_config_error(with(kMistral7B_v03, {{"sliding_window", 4096}}), {"'sliding_window'"});
  expect_config_error(with(kQwen3_8B, {{"layer_types", {"full_attention", "sliding_attention"}}}),
                      {"'layer_types'", "sliding_attention"});
  EXPECT_TRUE(parse(with(kQwen3_8B, {{"layer_types", {"full_attention", "full_attention"}}})).is_ok());
}

TEST(ModelConfig, RefusesMixturesOfExperts) {
  for (const char* field : {"num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size"})
    expect_config_error(with(kQwen3_8B, {{field, 8}}), {"test/config.json", std::string("'") + field + "'", "experts"});
  EXPECT_TRUE(parse(with(kQwen3_8B, {{"num_experts", 0}})).is_ok());
}

TEST(ModelConfig, RefusesOtherComputations) {
  expect_config_error(with(kLlama31_8B, {{"hidden_act", "gelu"}}), {"'hidden_act'", "gelu"});
  expect_config_error(with(kLlama31_8B, {{"mlp_bias", true}}), {"'mlp_bias'"});
  expect_config_error(with(kLlama31_8B, {{"partial_rotary_factor", 0.5}}), {"'partial_rotary_factor'"});
  expect_config_error(with(kLlama31_8B, {{"quantization_config", {{"quant_method", "awq"}}}}),
                      {"'quantization_config'"});
}

TEST(ModelConfig, Qwen3WithoutHeadDimTakesTransformersDefault) {
  // transformers' Qwen3Config defaults head_dim to 128, not hidden_size /
  // num_attention_heads: here 5120 / 64 = 80 would be wrong.
  const std::string text = with(kQwen3_8B, {{"head_dim", nullptr}, {"hidden_size", 5120}, {"num_attention_heads", 64}});
  const auto c = parse(text);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->head_dim, 128);
  const auto kv = geometry_from_config_json(text, "test/config.json");
  ASSERT_TRUE(kv.is_ok()) << kv.status().to_string();
  EXPECT_EQ(kv->k_head_dim, 128);
  EXPECT_EQ(c->kv_geometry().l1_bytes_per_token(), kv->l1_bytes_per_token());
  // Other families derive it, in both modules alike.
  const auto llama = parse(with(kLlama31_8B, {{"hidden_size", 3072}}));
  ASSERT_TRUE(llama.is_ok()) << llama.status().to_string();
  EXPECT_EQ(llama->head_dim, 96);
}

TEST(ModelConfig, RefusesInconsistentShapes) {
  expect_config_error(with(kQwen3_8B, {{"num_key_value_heads", 5}}), {"'num_key_value_heads'", "divide"});
  expect_config_error(with(kQwen3_8B, {{"head_dim", 127}}), {"'head_dim'", "even"});
  expect_config_error(with(kLlama31_8B, {{"hidden_size", 4001}}), {"'hidden_size'", "multiple"});
  expect_config_error(with(kQwen3_8B, {{"vocab_size", 0}}), {"'vocab_size'"});
  expect_config_error(with(kQwen3_8B, {{"intermediate_size", nullptr}}), {"'intermediate_size'", "missing"});
  expect_config_error(with(kQwen3_8B, {{"num_hidden_layers", "36"}}), {"'num_hidden_layers'", "integer"});
  expect_config_error(with(kQwen3_8B, {{"rms_norm_eps", 0}}), {"'rms_norm_eps'"});
  expect_config_error(with(kQwen3_8B, {{"tie_word_embeddings", "yes"}}), {"'tie_word_embeddings'"});
  expect_config_error(with(kQwen3_8B, {{"head_dim", 1 << 20}}), {"'head_dim'", "2^24"});
}

TEST(ModelConfig, RefusesTextThatIsNotAConfig) {
  expect_config_error("{", {"test/config.json", "JSON"});
  expect_config_error("[1]", {"test/config.json", "object"});
  expect_config_error("", {"JSON"});
}

TEST(ModelConfig, ValidateChecksAHandBuiltConfig) {
  ModelConfig c = *parse(kQwen3_8B);
  c.num_kv_heads = 0;
  EXPECT_TRUE(contains(c.validate().message(), "'num_key_value_heads'"));
  c = *parse(kQwen3_8B);
  c.qk_norm = false;
  EXPECT_FALSE(c.validate().is_ok());
  c = *parse(kLlama31_8B);
  c.rope_scaling.low_freq_factor = 0;
  EXPECT_TRUE(contains(c.validate().message(), "'rope_scaling.low_freq_factor'"));
}

TEST(ModelConfig, ReadsFilesAndModelDirectories) {
  const TempDir dir;
  testing::write_text(dir.path() / "config.json", std::string(kQwen3_8B));
  const auto from_dir = model_config_from_file(dir.path().string());
  ASSERT_TRUE(from_dir.is_ok()) << from_dir.status().to_string();
  EXPECT_EQ(from_dir->source, (dir.path() / "config.json").string());
  EXPECT_TRUE(model_config_from_file((dir.path() / "config.json").string()).is_ok());
  expect_error(model_config_from_file((dir.path() / "none.json").string()), StatusCode::kNotFound, {"none.json"});
  testing::write_text(dir.path() / "bad.json", with(kQwen3_8B, {{"head_dim", 7}}));
  expect_error(model_config_from_file((dir.path() / "bad.json").string()), StatusCode::kInvalidArgument,
               {"bad.json", "'head_dim'"});
}

// ---- KV geometry -------------------------------------------------------------------------

TEST(ModelConfig, KvGeometryAgreesWithTheKvModule) {
  // The two cases the modules once disagreed on: qwen3 without head_dim (one
  // refused it, one derived hidden/heads) and a float16 checkpoint (one gave
  // an FP16 L1, the model runtime writes BF16).
  const std::string qwen3_without_head_dim = with(kQwen3_8B, {{"head_dim", nullptr}, {"hidden_size", 2048}});
  const std::string qwen3_float16 = with(kQwen3_8B, {{"torch_dtype", "float16"}});
  const std::string llama_float32 = with(kLlama31_8B, {{"torch_dtype", nullptr}, {"dtype", "float32"}});
  for (std::string_view text : {kQwen3_8B, kLlama31_8B, kQwen25_7B, kMistral7B_v03, std::string_view(qwen3_without_head_dim),
                                std::string_view(qwen3_float16), std::string_view(llama_float32)}) {
    const auto c = parse(text);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    for (int page_size : {1, 16}) {
      GeometryOptions options;
      options.page_size = page_size;
      const auto kv = geometry_from_config_json(text, "test/config.json", options);
      ASSERT_TRUE(kv.is_ok()) << kv.status().to_string();
      const KvGeometry g = c->kv_geometry(page_size);
      EXPECT_TRUE(g.validate().is_ok());
      EXPECT_EQ(g.name, kv->name);
      EXPECT_EQ(g.num_layers, kv->num_layers);
      EXPECT_EQ(g.num_kv_heads, kv->num_kv_heads);
      EXPECT_EQ(g.total_kv_heads, kv->total_kv_heads);
      EXPECT_EQ(g.k_head_dim, kv->k_head_dim);
      EXPECT_EQ(g.v_head_dim, kv->v_head_dim);
      EXPECT_EQ(g.page_size, page_size);
      EXPECT_EQ(g.l1_dtype, L1Dtype::kBf16);
      EXPECT_EQ(g.l1_dtype, kv->l1_dtype);
      EXPECT_EQ(g.attention, AttentionKind::kMha);
      EXPECT_EQ(g.l1_bytes_per_token(), kv->l1_bytes_per_token());
    }
  }
  EXPECT_EQ(parse(kQwen3_8B)->kv_geometry().l1_bytes_per_token(), 147456u);
}

// ---- expected tensors ----------------------------------------------------------------------

// A tiny model of each architecture: 2 layers, GQA 4:2, head_dim 8.
std::string tiny_config(std::string_view model_type, bool tied, const json& extra = json::object()) {
  json c = {{"model_type", model_type}, {"vocab_size", 32}, {"hidden_size", 16}, {"intermediate_size", 24},
            {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 8},
            {"rope_theta", 10000.0}, {"max_position_embeddings", 64}, {"tie_word_embeddings", tied},
            {"torch_dtype", "bfloat16"}};
  for (const auto& [key, value] : extra.items()) c[key] = value;
  return c.dump();
}

ModelConfig tiny(std::string_view model_type, bool tied, const json& extra = json::object()) {
  auto c = model_config_from_json(tiny_config(model_type, tied, extra), "tiny/config.json");
  HIQ_CHECK_MSG(c.is_ok(), c.status().to_string().c_str());
  return *c;
}

TEST(ExpectedTensors, Qwen3HasQkNormAndNoBias) {
  const auto specs = expected_tensors(tiny("qwen3", false));
  // embed + 2 × (2 norms + 4 projections + 2 qk norms + 3 MLP) + final norm + lm_head
  ASSERT_EQ(specs.size(), 1u + 2 * 11 + 1 + 1);
  EXPECT_EQ(specs.front(), (TensorSpec{"model.embed_tokens.weight", {32, 16}}));
  EXPECT_EQ(specs.back(), (TensorSpec{"lm_head.weight", {32, 16}}));
  const std::vector<TensorSpec> layer1(specs.begin() + 12, specs.begin() + 23);
  const std::vector<TensorSpec> expected = {
      {"model.layers.1.input_layernorm.weight", {16}},
      {"model.layers.1.self_attn.q_proj.weight", {32, 16}},
      {"model.layers.1.self_attn.k_proj.weight", {16, 16}},
      {"model.layers.1.self_attn.v_proj.weight", {16, 16}},
      {"model.layers.1.self_attn.q_norm.weight", {8}},
      {"model.layers.1.self_attn.k_norm.weight", {8}},
      {"model.layers.1.self_attn.o_proj.weight", {16, 32}},
      {"model.layers.1.post_attention_layernorm.weight", {16}},
      {"model.layers.1.mlp.gate_proj.weight", {24, 16}},
      {"model.layers.1.mlp.up_proj.weight", {24, 16}},
      {"model.layers.1.mlp.down_proj.weight", {16, 24}},
  };
  EXPECT_EQ(layer1, expected);
  EXPECT_EQ(specs[specs.size() - 2], (TensorSpec{"model.norm.weight", {16}}));
}

TEST(ExpectedTensors, TiedEmbeddingsHaveNoLmHead) {
  const auto specs = expected_tensors(tiny("llama", true));
  ASSERT_EQ(specs.size(), 1u + 2 * 9 + 1);
  EXPECT_EQ(specs.back().name, "model.norm.weight");
}

TEST(ExpectedTensors, BiasesFollowTheArchitecture) {
  const auto count = [](const std::vector<TensorSpec>& specs, std::string_view suffix) {
    int n = 0;
    for (const TensorSpec& s : specs) n += s.name.ends_with(suffix);
    return n;
  };
  const auto qwen2 = expected_tensors(tiny("qwen2", false));
  EXPECT_EQ(count(qwen2, "q_proj.bias"), 2);
  EXPECT_EQ(count(qwen2, "k_proj.bias"), 2);
  EXPECT_EQ(count(qwen2, "o_proj.bias"), 0);
  EXPECT_EQ(count(qwen2, "q_norm.weight"), 0);
  const auto llama = expected_tensors(tiny("llama", false, {{"attention_bias", true}}));
  EXPECT_EQ(count(llama, "v_proj.bias"), 2);
  EXPECT_EQ(count(llama, "o_proj.bias"), 2);
  const std::vector<TensorSpec> biased_layer(llama.begin() + 1, llama.begin() + 14);
  EXPECT_EQ(biased_layer[4], (TensorSpec{"model.layers.0.self_attn.q_proj.bias", {32}}));
  EXPECT_EQ(biased_layer[5], (TensorSpec{"model.layers.0.self_attn.k_proj.bias", {16}}));
  EXPECT_EQ(count(expected_tensors(tiny("mistral", false)), ".bias"), 0);
}

// ---- binding checkpoints -------------------------------------------------------------------

// Writes `tensors` as a checkpoint of `config_text` and binds it.
struct Bound {
  TempDir dir;
  Result<Checkpoint> checkpoint = internal_error("not opened");
  Result<ModelWeights> weights = internal_error("not bound");
};

void write_and_bind(Bound& b, const std::string& config_text, const std::vector<WriterTensor>& tensors, int shards = 1) {
  testing::write_checkpoint(b.dir.path(), config_text, tensors, shards);
  const auto config = model_config_from_file(b.dir.path().string());
  ASSERT_TRUE(config.is_ok()) << config.status().to_string();
  b.checkpoint = Checkpoint::open(b.dir.path().string());
  ASSERT_TRUE(b.checkpoint.is_ok()) << b.checkpoint.status().to_string();
  b.weights = bind_weights(*config, *b.checkpoint);
}

bool same_bytes(const TensorView& view, const WriterTensor& t) {
  return view.bytes == t.data.size() && std::memcmp(view.data, t.data.data(), view.bytes) == 0;
}

const WriterTensor& named(const std::vector<WriterTensor>& tensors, std::string_view name) {
  for (const WriterTensor& t : tensors)
    if (t.name == name) return t;
  HIQ_CHECK_MSG(false, "no such tensor");
}

TEST(BindWeights, BindsATinyQwen3) {
  const ModelConfig config = tiny("qwen3", false);
  const auto tensors = testing::model_tensors(config);
  Bound b;
  write_and_bind(b, tiny_config("qwen3", false), tensors);
  ASSERT_TRUE(b.weights.is_ok()) << b.weights.status().to_string();
  const ModelWeights& w = *b.weights;
  ASSERT_EQ(w.layers.size(), 2u);
  EXPECT_TRUE(same_bytes(w.embed_tokens, named(tensors, "model.embed_tokens.weight")));
  EXPECT_TRUE(same_bytes(w.lm_head, named(tensors, "lm_head.weight")));
  EXPECT_TRUE(same_bytes(w.final_norm, named(tensors, "model.norm.weight")));
  const ModelWeights::Layer& l1 = w.layers[1];
  EXPECT_TRUE(same_bytes(l1.q_proj, named(tensors, "model.layers.1.self_attn.q_proj.weight")));
  EXPECT_TRUE(same_bytes(l1.down_proj, named(tensors, "model.layers.1.mlp.down_proj.weight")));
  ASSERT_TRUE(l1.q_norm.has_value());
  ASSERT_TRUE(l1.k_norm.has_value());
  EXPECT_TRUE(same_bytes(*l1.k_norm, named(tensors, "model.layers.1.self_attn.k_norm.weight")));
  EXPECT_FALSE(l1.q_proj_bias.has_value());
  EXPECT_FALSE(l1.o_proj_bias.has_value());
  EXPECT_EQ(l1.k_proj.shape, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(l1.gate_proj.dtype, TensorDtype::kBf16);
}

TEST(BindWeights, BindsATinyLlamaWithTiedEmbeddingsAcrossShards) {
  const ModelConfig config = tiny("llama", true);
  const auto tensors = testing::model_tensors(config, TensorDtype::kF16);
  Bound b;
  write_and_bind(b, tiny_config("llama", true), tensors, /*shards=*/3);
  ASSERT_TRUE(b.weights.is_ok()) << b.weights.status().to_string();
  const ModelWeights& w = *b.weights;
  EXPECT_EQ(b.checkpoint->files().size(), 3u);
  EXPECT_EQ(w.lm_head.name, "model.embed_tokens.weight");  // tied: the embedding itself
  EXPECT_EQ(w.lm_head.data, w.embed_tokens.data);
  EXPECT_FALSE(w.layers[0].q_norm.has_value());
  EXPECT_EQ(w.layers[0].o_proj.dtype, TensorDtype::kF16);
  EXPECT_TRUE(same_bytes(w.layers[1].v_proj, named(tensors, "model.layers.1.self_attn.v_proj.weight")));
}

TEST(BindWeights, BindsQwen2BiasesAndRecordsMixedDtypes) {
  const ModelConfig config = tiny("qwen2", false);
  auto tensors = testing::model_tensors(config);
  // Norms in F32, as some exporters keep them.
  for (WriterTensor& t : tensors)
    if (t.name.ends_with("norm.weight")) t = testing::make_tensor(t.name, TensorDtype::kF32, t.shape, 99);
  Bound b;
  write_and_bind(b, tiny_config("qwen2", false), tensors);
  ASSERT_TRUE(b.weights.is_ok()) << b.weights.status().to_string();
  const ModelWeights::Layer& l0 = b.weights->layers[0];
  ASSERT_TRUE(l0.q_proj_bias && l0.k_proj_bias && l0.v_proj_bias);
  EXPECT_FALSE(l0.o_proj_bias.has_value());
  EXPECT_EQ(l0.k_proj_bias->shape, (std::vector<int64_t>{16}));
  EXPECT_EQ(l0.input_layernorm.dtype, TensorDtype::kF32);
  EXPECT_EQ(l0.q_proj.dtype, TensorDtype::kBf16);
}

TEST(BindWeights, IgnoresRotaryInverseFrequencyBuffers) {
  const ModelConfig config = tiny("llama", false);
  auto tensors = testing::model_tensors(config);
  tensors.push_back(testing::make_tensor("model.layers.0.self_attn.rotary_emb.inv_freq", TensorDtype::kF32, {4}));
  tensors.push_back(testing::make_tensor("model.rotary_emb.inv_freq", TensorDtype::kF32, {4}));
  Bound b;
  write_and_bind(b, tiny_config("llama", false), tensors);
  EXPECT_TRUE(b.weights.is_ok()) << b.weights.status().to_string();
}

TEST(BindWeights, ReportsMissingTensors) {
  const ModelConfig config = tiny("qwen3", false);
  auto tensors = testing::model_tensors(config);
  std::erase_if(tensors, [](const WriterTensor& t) { return t.name.ends_with("q_norm.weight"); });
  Bound b;
  write_and_bind(b, tiny_config("qwen3", false), tensors);
  expect_error(b.weights, StatusCode::kNotFound,
               {b.dir.path().string(), "2 tensor(s)", "qwen3", "model.layers.0.self_attn.q_norm.weight",
                "model.layers.1.self_attn.q_norm.weight"});
}

TEST(BindWeights, ReportsAnUntiedCheckpointWithoutLmHead) {
  const ModelConfig tied = tiny("qwen3", true);
  Bound b;
  write_and_bind(b, tiny_config("qwen3", false), testing::model_tensors(tied));
  expect_error(b.weights, StatusCode::kNotFound, {"lm_head.weight", "tie_word_embeddings is false"});
}

TEST(BindWeights, ReportsUnexpectedTensorsWithTheirFile) {
  const ModelConfig config = tiny("qwen3", false);
  auto tensors = testing::model_tensors(config);
  tensors.push_back(testing::make_tensor("model.layers.0.self_attn.q_proj.bias", TensorDtype::kBf16, {32}));
  Bound b;
  write_and_bind(b, tiny_config("qwen3", false), tensors);
  expect_error(b.weights, StatusCode::kInvalidArgument,
               {"1 tensor(s)", "does not use", "'model.layers.0.self_attn.q_proj.bias'", "model.safetensors"});
}

// Qwen3-0.6B and -1.7B tie their embeddings and still store lm_head.weight (a
// copy): transformers loads them with the embeddings as the LM head, and so
// must we — whatever the stored copy holds.
TEST(BindWeights, ATiedCheckpointThatStillStoresItsLmHeadUsesTheEmbeddings) {
  const ModelConfig untied = tiny("qwen3", false);
  for (const bool copy : {true, false}) {
    SCOPED_TRACE(copy ? "lm_head.weight a copy of the embeddings" : "lm_head.weight different");
    auto tensors = testing::model_tensors(untied);
    const auto embed = std::find_if(tensors.begin(), tensors.end(),
                                    [](const WriterTensor& t) { return t.name == "model.embed_tokens.weight"; });
    for (WriterTensor& t : tensors)
      if (t.name == "lm_head.weight" && copy) t.data = embed->data;
    Bound b;
    write_and_bind(b, tiny_config("qwen3", true), tensors);
    ASSERT_TRUE(b.weights.is_ok()) << b.weights.status().to_string();
    EXPECT_EQ(b.weights->lm_head.data, b.weights->embed_tokens.data);
  }
}

// The stored copy may be of another dtype (an F32 lm_head beside BF16
// embeddings): the same values, widened or rounded once, are no difference
// worth a warning; other values are, and so is an infinity against a number.
TEST(BindWeights, ATiedCheckpointsStoredLmHeadIsComparedByValueAcrossDtypes) {
  const ModelConfig untied = tiny("qwen3", false);
  // The embeddings' values: every one exact in F16 and BF16 (k/32), or F32
  // ones that each half type must round (BF16 embeddings are then those
  // rounded, F16 ones those truncated to 11 bits, an exact F16 value).
  const auto original = [](size_t i, bool rounded) {
    const float exact = (static_cast<float>(static_cast<int>(i % 61) - 30) + 0.5f) / 32.0f;  // normal halves, ≠ 0
    return rounded ? exact * (1.0f + 0x1p-12f * static_cast<float>(i % 7 + 1)) : exact;
  };
  const auto as_f16 = [](float f) { return std::bit_cast<float>(std::bit_cast<uint32_t>(f) & 0xFFFFE000u); };
  struct Case {
    TensorDtype embed, head;
    bool rounded;              // values the half types cannot hold
    float change;              // added to one element of the head (0: a copy)
    bool warned;
  };
  const float inf = std::numeric_limits<float>::infinity();
  for (const Case c : {Case{TensorDtype::kBf16, TensorDtype::kF32, false, 0, false},
                       Case{TensorDtype::kF32, TensorDtype::kBf16, true, 0, false},   // the head rounded once
                       Case{TensorDtype::kF16, TensorDtype::kF32, true, 0, false},
                       Case{TensorDtype::kF16, TensorDtype::kBf16, true, 0, false},  // both rounded from F32
                       Case{TensorDtype::kBf16, TensorDtype::kF32, false, 0.5f, true},
                       Case{TensorDtype::kBf16, TensorDtype::kF32, false, 0x1p-4f, true},
                       Case{TensorDtype::kBf16, TensorDtype::kF32, false, inf, true},
                       Case{TensorDtype::kBf16, TensorDtype::kBf16, false, 0.5f, true}}) {
    SCOPED_TRACE(std::string(tensor_dtype_name(c.embed)) + " embeddings, " + std::string(tensor_dtype_name(c.head)) +
                 " head, change " + std::to_string(c.change));
    auto tensors = testing::model_tensors(untied);
    auto embed = std::find_if(tensors.begin(), tensors.end(),
                              [](const WriterTensor& t) { return t.name == "model.embed_tokens.weight"; });
    auto head = std::find_if(tensors.begin(), tensors.end(), [](const WriterTensor& t) { return t.name == "lm_head.weight"; });
    const size_t n = static_cast<size_t>(testing::element_count(embed->shape));
    std::vector<float> embed_values(n), head_values(n);
    for (size_t i = 0; i < n; ++i) {
      const float f = original(i, c.rounded);
      // Each side as its own type holds it: F16 exactly (truncated), BF16 rounded by the writer, F32 as is.
      embed_values[i] = c.embed == TensorDtype::kF16 ? as_f16(f) : f;
      head_values[i] = c.head == TensorDtype::kF16 ? as_f16(f) : f;
    }
    head_values[n / 2 + 3] += c.change;  // one element (a table this small is checked in every row)
    embed->dtype = testing::dtype_text(c.embed);
    embed->data = testing::encode_floats(embed_values, c.embed);
    head->dtype = testing::dtype_text(c.head);
    head->data = testing::encode_floats(head_values, c.head);

    std::vector<std::string> warnings;
    set_log_sink([&](LogLevel level, std::string_view, std::string_view message) {
      if (level == LogLevel::kWarning) warnings.emplace_back(message);
    });
    Bound b;
    write_and_bind(b, tiny_config("qwen3", true), tensors);
    set_log_sink(nullptr);
    ASSERT_TRUE(b.weights.is_ok()) << b.weights.status().to_string();
    EXPECT_EQ(b.weights->lm_head.data, b.weights->embed_tokens.data);
    const bool warned = std::any_of(warnings.begin(), warnings.end(), [](const std::string& w) {
      return w.find("'lm_head.weight' differs from the embeddings") != std::string::npos;
    });
    EXPECT_EQ(warned, c.warned);
  }
}

TEST(BindWeights, ATiedCheckpointsStoredLmHeadMustHaveTheEmbeddingsShape) {
  const ModelConfig untied = tiny("llama", false);
  auto tensors = testing::model_tensors(untied);
  for (WriterTensor& t : tensors)
    if (t.name == "lm_head.weight") t = testing::make_tensor(t.name, TensorDtype::kBf16, {8, 16});
  Bound b;
  write_and_bind(b, tiny_config("llama", true), tensors);
  expect_error(b.weights, StatusCode::kInvalidArgument, {"'lm_head.weight' has shape [8, 16]", "tie_word_embeddings"});
}

TEST(BindWeights, ReportsWrongShapesWithTheirFile) {
  const ModelConfig config = tiny("llama", false);
  auto tensors = testing::model_tensors(config);
  for (WriterTensor& t : tensors)
    if (t.name == "model.layers.1.mlp.up_proj.weight") t = testing::make_tensor(t.name, TensorDtype::kBf16, {16, 24});
  Bound b;
  write_and_bind(b, tiny_config("llama", false), tensors, /*shards=*/2);
  expect_error(b.weights, StatusCode::kInvalidArgument,
               {"model.layers.1.mlp.up_proj.weight", "[16, 24]", "expected [24, 16]", "-of-00002.safetensors"});
}

// A layer count past the checkpoint's (a typo, or a file crafted to make the
// loader build millions of names) is refused at once, naming both counts.
TEST(BindWeights, RefusesMoreLayersThanTheCheckpointHoldsAtOnce) {
  const ModelConfig config = tiny("qwen3", false);
  const auto tensors = testing::model_tensors(config);
  for (int layers : {3, 1 << 24}) {
    Bound b;
    write_and_bind(b, tiny_config("qwen3", false, {{"num_hidden_layers", layers}}), tensors);
    expect_error(b.weights, StatusCode::kNotFound,
                 {"config.json says " + std::to_string(layers) + " layers", "tensors of 2", "model.layers.0 to 1"});
  }
}

TEST(BindWeights, ListsAtMostEightNames) {
  const ModelConfig config = tiny("qwen3", false, {{"num_hidden_layers", 12}});
  auto tensors = testing::model_tensors(config);
  std::erase_if(tensors, [](const WriterTensor& t) { return t.name.ends_with("k_norm.weight"); });
  Bound b;
  write_and_bind(b, tiny_config("qwen3", false, {{"num_hidden_layers", 12}}), tensors);
  expect_error(b.weights, StatusCode::kNotFound, {"12 tensor(s)", "and 4 more"});
}

}  // namespace
}  // namespace hiq
