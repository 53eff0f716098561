// Tests of kv/model_config.h and kv/geometry.h: KV geometries from presets and
// from Hugging Face config.json text and files, and the errors for bad input.
#include "expect_error.h"
#include "kv/model_config.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <random>
#include <string>
#include <string_view>
#include <system_error>

#include <gtest/gtest.h>

#include "kv/geometry.h"
#include "kv/hf_config.h"

namespace hiq {
namespace {

using testing::contains;
using testing::expect_error;

Result<KvGeometry> preset(const std::string& name, int tp = 1) {
  GeometryOptions options;
  options.tp_size = tp;
  return resolve_model_geometry(name, options);
}

Result<KvGeometry> parse(std::string_view json, const GeometryOptions& options = {}) {
  return geometry_from_config_json(json, "test/config.json", options);
}

// ---- presets ---------------------------------------------------------------------

TEST(ModelPresets, Qwen3_8B) {
  const auto g = preset("qwen3-8b");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->name, "qwen3-8b");
  EXPECT_EQ(g->attention, AttentionKind::kMha);
  EXPECT_EQ(g->num_layers, 36);
  EXPECT_EQ(g->num_kv_heads, 8);
  EXPECT_EQ(g->total_kv_heads, 8);
  EXPECT_EQ(g->k_head_dim, 128);
  EXPECT_EQ(g->v_head_dim, 128);
  EXPECT_EQ(g->tp_size, 1);
  EXPECT_EQ(g->page_size, 1);
  EXPECT_EQ(g->l1_dtype, L1Dtype::kBf16);
  EXPECT_EQ(g->rows_per_layer(), 2);
  EXPECT_EQ(g->row_shape(KvPart::kK), (RowShape{8, 128}));
  EXPECT_EQ(g->row_shape(KvPart::kV), (RowShape{8, 128}));
  EXPECT_EQ(g->row_shape(KvPart::kK).elements(), 1024u);
  EXPECT_EQ(g->l1_bytes_per_token(), 147456u);  // 36 layers × 2 rows × 8 × 128 × 2 B
  EXPECT_TRUE(g->validate().is_ok());
}

TEST(ModelPresets, Llama31_8B_DerivesHeadDim) {
  const auto g = preset("llama-3.1-8b");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->num_layers, 32);
  EXPECT_EQ(g->num_kv_heads, 8);
  EXPECT_EQ(g->k_head_dim, 128);  // hidden_size 4096 / 32 attention heads
  EXPECT_EQ(g->v_head_dim, 128);
  EXPECT_EQ(g->l1_bytes_per_token(), 131072u);
}

TEST(ModelPresets, Qwen3_32B_SplitsHeadsOverTp) {
  const auto g = preset("qwen3-32b", 4);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->num_layers, 64);
  EXPECT_EQ(g->num_kv_heads, 2);
  EXPECT_EQ(g->total_kv_heads, 8);
  EXPECT_EQ(g->tp_size, 4);
  EXPECT_EQ(g->k_head_dim, 128);
  EXPECT_EQ(g->l1_bytes_per_token(), 64u * 2 * 2 * 128 * 2);

  const auto tp1 = preset("qwen3-32b");
  ASSERT_TRUE(tp1.is_ok());
  EXPECT_EQ(tp1->num_kv_heads, 8);
  EXPECT_EQ(tp1->l1_bytes_per_token(), 4 * g->l1_bytes_per_token());
}

TEST(ModelPresets, Qwen3_32B_ReplicatesHeadsBeyondTheirCount) {
  const auto g = preset("qwen3-32b", 16);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->num_kv_heads, 1);
  EXPECT_EQ(g->total_kv_heads, 8);
  EXPECT_EQ(g->tp_size, 16);
  const auto tp8 = preset("qwen3-32b", 8);
  ASSERT_TRUE(tp8.is_ok());
  EXPECT_EQ(tp8->num_kv_heads, 1);
}

TEST(ModelPresets, TpThatNeitherDividesNorIsAMultipleIsAnError) {
  expect_error(preset("qwen3-32b", 3), StatusCode::kInvalidArgument, {"--tp", "3", "qwen3-32b"});
  expect_error(preset("qwen3-8b", 12), StatusCode::kInvalidArgument, {"--tp", "12"});
}

TEST(ModelPresets, NonPositiveTpOrPageSizeIsAnError) {
  expect_error(preset("qwen3-8b", 0), StatusCode::kInvalidArgument, {"--tp"});
  expect_error(preset("qwen3-8b", -2), StatusCode::kInvalidArgument, {"--tp", "-2"});
  GeometryOptions options;
  options.page_size = 0;
  expect_error(resolve_model_geometry("qwen3-8b", options), StatusCode::kInvalidArgument, {"--page-size"});
}

TEST(ModelPresets, DeepSeekV3IsMla) {
  const auto g = preset("deepseek-v3");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->attention, AttentionKind::kMla);
  EXPECT_EQ(g->num_layers, 61);
  EXPECT_EQ(g->num_kv_heads, 1);
  EXPECT_EQ(g->total_kv_heads, 1);
  EXPECT_EQ(g->k_head_dim, 576);  // kv_lora_rank 512 + qk_rope_head_dim 64
  EXPECT_EQ(g->v_head_dim, 0);
  EXPECT_EQ(g->rows_per_layer(), 1);
  EXPECT_EQ(g->row_shape(KvPart::kK), (RowShape{1, 576}));
  EXPECT_EQ(g->row_shape(KvPart::kV).elements(), 0u);
  EXPECT_EQ(g->l1_bytes_per_token(), 70272u);  // 61 × 576 × 2 B
  EXPECT_EQ(g->l1_bytes_per_token(), 61u * 576 * 2);
  EXPECT_TRUE(g->validate().is_ok());
}

TEST(ModelPresets, DeepSeekV3LatentIsReplicatedOverTp) {
  const auto g = preset("deepseek-v3", 8);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->tp_size, 8);
  EXPECT_EQ(g->num_kv_heads, 1);
  EXPECT_EQ(g->k_head_dim, 576);
  EXPECT_EQ(g->l1_bytes_per_token(), 70272u);
}

TEST(ModelPresets, PageSizeIsCarried) {
  GeometryOptions options;
  options.page_size = 64;
  const auto g = resolve_model_geometry("qwen3-8b", options);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->page_size, 64);
  EXPECT_EQ(g->l1_bytes_per_token(), 147456u);  // per token, not per page
}

TEST(ModelPresets, DtypeOptionOverridesConfig) {
  GeometryOptions options;
  options.l1_dtype = L1Dtype::kFp16;
  const auto g = resolve_model_geometry("qwen3-8b", options);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->l1_dtype, L1Dtype::kFp16);
  EXPECT_EQ(l1_dtype_name(g->l1_dtype), "fp16");
}

TEST(ModelPresets, EveryPresetParsesAndValidates) {
  const auto names = model_preset_names();
  ASSERT_GE(names.size(), 5u);
  for (std::string_view expected : {"qwen3-8b", "qwen3-32b", "llama-3.1-8b", "deepseek-v3"}) {
    bool found = false;
    for (std::string_view n : names) found = found || n == expected;
    EXPECT_TRUE(found) << expected << " is not a preset";
  }
  for (std::string_view name : names) {
    SCOPED_TRACE(std::string(name));
    const auto config = model_preset_config(name);
    ASSERT_TRUE(config.has_value());
    EXPECT_FALSE(config->empty());
    for (int tp : {1, 2, 8}) {
      const auto g = preset(std::string(name), tp);
      ASSERT_TRUE(g.is_ok()) << "tp " << tp << ": " << g.status().to_string();
      EXPECT_TRUE(g->validate().is_ok()) << g->validate().to_string();
      EXPECT_EQ(g->name, name);
      EXPECT_EQ(g->tp_size, tp);
      EXPECT_GT(g->l1_bytes_per_token(), 0u);
      EXPECT_EQ(g->l1_bytes_per_token(),
                static_cast<size_t>(g->num_layers) * 2 *
                    (g->row_shape(KvPart::kK).elements() +
                     (g->attention == AttentionKind::kMha ? g->row_shape(KvPart::kV).elements() : 0)));
    }
  }
  EXPECT_FALSE(model_preset_config("no-such-model").has_value());
}

TEST(ModelPresets, UnknownModelIsNotFoundAndListsPresets) {
  const auto r = resolve_model_geometry("no-such-model");
  expect_error(r, StatusCode::kNotFound, {"no-such-model"});
  for (std::string_view name : model_preset_names())
    EXPECT_TRUE(contains(r.status().message(), name)) << "preset " << name << " not listed: " << r.status().message();
}

// ---- config.json text ------------------------------------------------------------

TEST(ConfigJson, Qwen2WithoutHeadDimDerivesIt) {
  const auto g = parse(R"({"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584,
                           "num_attention_heads": 28, "num_key_value_heads": 4})");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->name, "test/config.json");
  EXPECT_EQ(g->num_layers, 28);
  EXPECT_EQ(g->num_kv_heads, 4);
  EXPECT_EQ(g->k_head_dim, 128);
  EXPECT_EQ(g->v_head_dim, 128);
  EXPECT_EQ(g->l1_dtype, L1Dtype::kBf16);  // no dtype field: bf16
  EXPECT_EQ(g->l1_bytes_per_token(), 28u * 2 * 4 * 128 * 2);
}

TEST(ConfigJson, ExplicitHeadDimWinsOverHiddenSize) {
  // Qwen3-style: head_dim is not hidden_size / heads (4096 / 32 = 128).
  const auto g = parse(R"({"model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 4096,
                           "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64})");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->k_head_dim, 64);
}

TEST(ConfigJson, MissingKvHeadsDefaultsToAttentionHeads) {
  const auto g = parse(R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 1024,
                           "num_attention_heads": 16})");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->num_kv_heads, 16);
  EXPECT_EQ(g->total_kv_heads, 16);
  EXPECT_EQ(g->k_head_dim, 64);
}

// config.json follows the one policy for model files: a key given twice is
// refused (naming it and the file), as every reader of the directory does.
TEST(ConfigJson, AKeyGivenTwiceIsRefused) {
  const auto c = parse_hf_config(
      R"({"model_type": "mistral", "num_hidden_layers": 2, "num_attention_heads": 8, "head_dim": 64, )"
      R"("rms_norm_eps": 1e-6, "rms_norm_eps": 1e-5})",
      "test/config.json");
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("test/config.json"), std::string::npos) << c.status().to_string();
  EXPECT_NE(c.status().message().find("rms_norm_eps"), std::string::npos) << c.status().to_string();
}

TEST(ConfigJson, Dtypes) {
  constexpr std::string_view kBase =
      R"({"model_type": "mistral", "num_hidden_layers": 2, "num_attention_heads": 8, "head_dim": 64, )";
  const auto with = [&](std::string_view tail) { return std::string(kBase) + std::string(tail); };
  const auto dtype_of = [&](std::string_view tail) {
    const auto c = parse_hf_config(with(tail), "test/config.json");
    EXPECT_TRUE(c.is_ok()) << c.status().to_string();
    return c.is_ok() ? c->dtype : CheckpointDtype::kBf16;
  };

  EXPECT_EQ(dtype_of(R"("dtype": "float16"})"), CheckpointDtype::kF16);
  EXPECT_EQ(dtype_of(R"("torch_dtype": "float16"})"), CheckpointDtype::kF16);  // older transformers
  EXPECT_EQ(dtype_of(R"("dtype": "bfloat16"})"), CheckpointDtype::kBf16);
  EXPECT_EQ(dtype_of(R"("torch_dtype": "float32"})"), CheckpointDtype::kF32);
  EXPECT_EQ(dtype_of(R"("vocab_size": 32000})"), CheckpointDtype::kBf16);  // absent: bfloat16
  // The newer key wins when both are present.
  EXPECT_EQ(dtype_of(R"("dtype": "float16", "torch_dtype": "bfloat16"})"), CheckpointDtype::kF16);
  // A null "dtype" is absent: "torch_dtype" decides.
  EXPECT_EQ(dtype_of(R"("dtype": null, "torch_dtype": "float16"})"), CheckpointDtype::kF16);

  // The checkpoint's dtype does not choose the L1: the runtime converts the
  // weights at load and writes BF16 KV whatever they were saved in.
  for (std::string_view tail : {R"("dtype": "float16"})", R"("torch_dtype": "float32"})", R"("dtype": "bfloat16"})"}) {
    const auto g = parse(with(tail));
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    EXPECT_EQ(g->l1_dtype, L1Dtype::kBf16) << tail;
  }

  expect_error(parse(with(R"("dtype": "int8"})")), StatusCode::kInvalidArgument,
               {"'dtype'", "int8", "test/config.json"});
  expect_error(parse(with(R"("torch_dtype": "int8"})")), StatusCode::kInvalidArgument, {"'torch_dtype'", "int8"});
  expect_error(parse(with(R"("torch_dtype": 16})")), StatusCode::kInvalidArgument, {"'torch_dtype'", "string"});

  // An FP16 L1 is asked for, never inferred.
  GeometryOptions options;
  options.l1_dtype = L1Dtype::kFp16;
  const auto g = parse(with(R"("dtype": "bfloat16"})"), options);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->l1_dtype, L1Dtype::kFp16);
}

TEST(ConfigJson, Qwen3WithoutHeadDimTakesTransformersDefault) {
  // Qwen3Config's head_dim defaults to 128; hidden_size / heads (1024 / 16 = 64) is not used.
  const auto g = parse(R"({"model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 1024,
                           "num_attention_heads": 16, "num_key_value_heads": 8})");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->k_head_dim, 128);
  EXPECT_EQ(g->v_head_dim, 128);
  // Nor does it need hidden_size at all.
  const auto bare = parse(R"({"model_type": "qwen3", "num_hidden_layers": 2, "num_attention_heads": 16})");
  ASSERT_TRUE(bare.is_ok()) << bare.status().to_string();
  EXPECT_EQ(bare->k_head_dim, 128);
}

TEST(ConfigJson, EveryPresetMeansTheSameToTheParserAndTheGeometry) {
  // Presets go through the one parser; their geometry is its head_dim and KV heads.
  for (std::string_view name : model_preset_names()) {
    const auto hf = parse_hf_config(*model_preset_config(name), name);
    ASSERT_TRUE(hf.is_ok()) << name << ": " << hf.status().to_string();
    const auto g = preset(std::string(name));
    ASSERT_TRUE(g.is_ok()) << name << ": " << g.status().to_string();
    EXPECT_EQ(g->num_layers, hf->num_layers) << name;
    EXPECT_EQ(g->l1_dtype, L1Dtype::kBf16) << name;
    if (is_mla_family(hf->family)) {
      EXPECT_EQ(g->k_head_dim, hf->kv_lora_rank + hf->qk_rope_head_dim) << name;
    } else {
      EXPECT_EQ(g->k_head_dim, hf->head_dim) << name;
      EXPECT_EQ(g->total_kv_heads, hf->num_kv_heads) << name;
    }
  }
}

TEST(ConfigJson, HeadDimNullIsAbsent) {
  const auto g = parse(R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 3072,
                           "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": null})");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->k_head_dim, 96);
}

TEST(ConfigJson, MissingFieldIsNamed) {
  expect_error(parse(R"({"model_type": "qwen3", "hidden_size": 4096, "num_attention_heads": 32,
                         "num_key_value_heads": 8, "head_dim": 128})"),
               StatusCode::kInvalidArgument, {"'num_hidden_layers'", "missing", "test/config.json"});
  expect_error(parse(R"({"num_hidden_layers": 2, "num_attention_heads": 8, "head_dim": 64})"),
               StatusCode::kInvalidArgument, {"'model_type'", "missing", "test/config.json"});
  expect_error(parse(R"({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 8})"),
               StatusCode::kInvalidArgument, {"'hidden_size'", "missing", "test/config.json"});
  expect_error(parse(R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 512})"),
               StatusCode::kInvalidArgument, {"'num_attention_heads'", "missing"});
}

TEST(ConfigJson, WrongTypeIsNamed) {
  expect_error(parse(R"({"model_type": "qwen3", "num_hidden_layers": "36", "num_attention_heads": 32,
                         "num_key_value_heads": 8, "head_dim": 128})"),
               StatusCode::kInvalidArgument, {"'num_hidden_layers'", "integer", "\"36\"", "test/config.json"});
  expect_error(parse(R"({"model_type": "qwen3", "num_hidden_layers": 36.5, "num_attention_heads": 32,
                         "head_dim": 128})"),
               StatusCode::kInvalidArgument, {"'num_hidden_layers'", "integer"});
  expect_error(parse(R"({"model_type": 3, "num_hidden_layers": 36})"), StatusCode::kInvalidArgument,
               {"'model_type'", "string"});
}

TEST(ConfigJson, NonPositiveOrHugeValueIsNamed) {
  expect_error(parse(R"({"model_type": "qwen3", "num_hidden_layers": -1, "num_attention_heads": 32,
                         "num_key_value_heads": 8, "head_dim": 128})"),
               StatusCode::kInvalidArgument, {"'num_hidden_layers'", "positive", "-1", "test/config.json"});
  expect_error(parse(R"({"model_type": "qwen3", "num_hidden_layers": 2, "num_attention_heads": 32,
                         "num_key_value_heads": 8, "head_dim": 0})"),
               StatusCode::kInvalidArgument, {"'head_dim'", "positive"});
  expect_error(parse(R"({"model_type": "qwen3", "num_hidden_layers": 2, "num_attention_heads": 32,
                         "num_key_value_heads": 0, "head_dim": 128})"),
               StatusCode::kInvalidArgument, {"'num_key_value_heads'", "positive"});
  expect_error(parse(R"({"model_type": "qwen3", "num_hidden_layers": 100000000000, "num_attention_heads": 32,
                         "head_dim": 128})"),
               StatusCode::kInvalidArgument, {"'num_hidden_layers'", "100000000000"});
  expect_error(parse(R"({"model_type": "qwen3", "num_hidden_layers": 18446744073709551615,
                         "num_attention_heads": 32, "head_dim": 128})"),
               StatusCode::kInvalidArgument, {"'num_hidden_layers'", "positive"});
}

TEST(ConfigJson, KvHeadsMustDivideAttentionHeads) {
  expect_error(parse(R"({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 32,
                         "num_key_value_heads": 12, "head_dim": 128})"),
               StatusCode::kInvalidArgument,
               {"'num_key_value_heads'", "12", "32", "num_attention_heads", "test/config.json"});
}

TEST(ConfigJson, HiddenSizeMustBeAMultipleOfHeadsWithoutHeadDim) {
  expect_error(parse(R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 1000,
                         "num_attention_heads": 32, "num_key_value_heads": 8})"),
               StatusCode::kInvalidArgument, {"'hidden_size'", "1000", "32", "head_dim", "test/config.json"});
  // With an explicit head_dim the same hidden_size is fine.
  const auto g = parse(R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 1000,
                           "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 32})");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->k_head_dim, 32);
}

TEST(ConfigJson, UnknownModelTypeIsNamed) {
  expect_error(parse(R"({"model_type": "gpt2", "num_hidden_layers": 12, "num_attention_heads": 12,
                         "hidden_size": 768})"),
               StatusCode::kInvalidArgument, {"'model_type'", "gpt2", "not supported", "test/config.json"});
}

TEST(ConfigJson, DeepSeek) {
  const auto g = parse(R"({"model_type": "deepseek_v2", "num_hidden_layers": 27, "kv_lora_rank": 512,
                           "qk_rope_head_dim": 64, "num_key_value_heads": 16, "v_head_dim": 128})");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->attention, AttentionKind::kMla);
  EXPECT_EQ(g->k_head_dim, 576);
  EXPECT_EQ(g->v_head_dim, 0);  // the config's v_head_dim is the attention output, not a cached row
  EXPECT_EQ(g->num_kv_heads, 1);
  EXPECT_EQ(g->l1_bytes_per_token(), 27u * 576 * 2);

  expect_error(parse(R"({"model_type": "deepseek_v3", "num_hidden_layers": 61, "qk_rope_head_dim": 64})"),
               StatusCode::kInvalidArgument, {"'kv_lora_rank'", "missing", "test/config.json"});
  expect_error(parse(R"({"model_type": "deepseek_v3", "num_hidden_layers": 61, "kv_lora_rank": 512})"),
               StatusCode::kInvalidArgument, {"'qk_rope_head_dim'", "missing"});
}

TEST(ConfigJson, InvalidJsonNamesSource) {
  expect_error(geometry_from_config_json(R"({"model_type": "qwen3", )", "broken.json"),
               StatusCode::kInvalidArgument, {"broken.json", "JSON"});
  expect_error(geometry_from_config_json("", "empty.json"), StatusCode::kInvalidArgument, {"empty.json", "JSON"});
  expect_error(geometry_from_config_json(R"([{"model_type": "qwen3"}])", "array.json"),
               StatusCode::kInvalidArgument, {"array.json", "object"});
  expect_error(geometry_from_config_json("42", "number.json"), StatusCode::kInvalidArgument,
               {"number.json", "object"});
}

// ---- config.json files -----------------------------------------------------------

// A fresh directory under the system temp dir, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
    path_ = std::filesystem::temp_directory_path() /
            ("hiq_model_config_test_" + std::to_string(stamp) + "_" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

  std::filesystem::path write(const std::string& name, std::string_view text) const {
    const std::filesystem::path file = path_ / name;
    std::ofstream out(file, std::ios::binary);
    out << text;
    return file;
  }

 private:
  std::filesystem::path path_;
};

constexpr std::string_view kLlamaHd96 = R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 3072,
    "num_attention_heads": 32, "num_key_value_heads": 8, "torch_dtype": "float16"})";

TEST(ConfigFile, ReadsByFileAndByDirectory) {
  const TempDir dir;
  const std::filesystem::path file = dir.write("config.json", kLlamaHd96);

  const auto by_file = geometry_from_config_file(file.string());
  ASSERT_TRUE(by_file.is_ok()) << by_file.status().to_string();
  EXPECT_EQ(by_file->name, file.string());
  EXPECT_EQ(by_file->num_layers, 2);
  EXPECT_EQ(by_file->num_kv_heads, 8);
  EXPECT_EQ(by_file->k_head_dim, 96);
  EXPECT_EQ(by_file->l1_dtype, L1Dtype::kBf16);  // float16 weights, converted at load: a BF16 L1
  EXPECT_EQ(by_file->l1_bytes_per_token(), 2u * 2 * 8 * 96 * 2);

  const auto by_dir = geometry_from_config_file(dir.path().string());
  ASSERT_TRUE(by_dir.is_ok()) << by_dir.status().to_string();
  EXPECT_EQ(by_dir->k_head_dim, 96);
  EXPECT_EQ(by_dir->l1_bytes_per_token(), by_file->l1_bytes_per_token());
  EXPECT_TRUE(contains(by_dir->name, "config.json")) << by_dir->name;

  // resolve_model_geometry takes paths too, and passes the options on.
  GeometryOptions options;
  options.tp_size = 4;
  const auto resolved = resolve_model_geometry(dir.path().string(), options);
  ASSERT_TRUE(resolved.is_ok()) << resolved.status().to_string();
  EXPECT_EQ(resolved->num_kv_heads, 2);
  const auto resolved_file = resolve_model_geometry(file.string());
  ASSERT_TRUE(resolved_file.is_ok()) << resolved_file.status().to_string();
  EXPECT_EQ(resolved_file->num_kv_heads, 8);
}

TEST(ConfigFile, ErrorsNameThePath) {
  const TempDir dir;
  const std::filesystem::path bad = dir.write("bad.json", R"({"model_type": "qwen3", "num_hidden_layers": "x"})");
  expect_error(geometry_from_config_file(bad.string()), StatusCode::kInvalidArgument,
               {bad.string(), "'num_hidden_layers'"});
  const std::filesystem::path junk = dir.write("junk.json", "not json at all");
  expect_error(geometry_from_config_file(junk.string()), StatusCode::kInvalidArgument, {junk.string(), "JSON"});
}

TEST(ConfigFile, MissingFileIsNotFound) {
  const TempDir dir;
  const std::string missing = (dir.path() / "nope" / "config.json").string();
  expect_error(geometry_from_config_file(missing), StatusCode::kNotFound, {missing});
  // A directory without a config.json.
  expect_error(geometry_from_config_file(dir.path().string()), StatusCode::kNotFound, {"config.json"});
  // Through --model resolution: a path is not looked up as a preset.
  expect_error(resolve_model_geometry(missing), StatusCode::kNotFound, {missing});
}

// ---- KvGeometry::validate --------------------------------------------------------

KvGeometry valid_mha() {
  KvGeometry g;
  g.name = "t";
  g.num_layers = 4;
  g.num_kv_heads = 2;
  g.k_head_dim = 64;
  g.v_head_dim = 64;
  g.total_kv_heads = 2;
  return g;
}

KvGeometry valid_mla() {
  KvGeometry g;
  g.name = "t";
  g.attention = AttentionKind::kMla;
  g.num_layers = 4;
  g.num_kv_heads = 1;
  g.k_head_dim = 576;
  g.v_head_dim = 0;
  g.total_kv_heads = 1;
  return g;
}

void expect_invalid(const KvGeometry& g, std::string_view field) {
  const Status s = g.validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "field " << field << ": " << s.to_string();
  EXPECT_TRUE(contains(s.message(), field)) << s.message();
}

TEST(KvGeometryValidate, AcceptsValid) {
  EXPECT_TRUE(valid_mha().validate().is_ok()) << valid_mha().validate().to_string();
  EXPECT_TRUE(valid_mla().validate().is_ok()) << valid_mla().validate().to_string();
  EXPECT_EQ(valid_mha().l1_bytes_per_token(), 4u * 2 * 2 * 64 * 2);
  EXPECT_EQ(valid_mla().l1_bytes_per_token(), 4u * 576 * 2);
}

TEST(KvGeometryValidate, RejectsNonPositiveFields) {
  for (int bad : {0, -1}) {
    SCOPED_TRACE(bad);
    KvGeometry g = valid_mha();
    g.num_layers = bad;
    expect_invalid(g, "'num_layers'");
    g = valid_mha();
    g.num_kv_heads = bad;
    expect_invalid(g, "'num_kv_heads'");
    g = valid_mha();
    g.k_head_dim = bad;
    expect_invalid(g, "'k_head_dim'");
    g = valid_mha();
    g.v_head_dim = bad;
    expect_invalid(g, "'v_head_dim'");
    g = valid_mha();
    g.page_size = bad;
    expect_invalid(g, "'page_size'");
    g = valid_mha();
    g.tp_size = bad;
    expect_invalid(g, "'tp_size'");
    g = valid_mla();
    g.k_head_dim = bad;
    expect_invalid(g, "'k_head_dim'");
  }
}

TEST(KvGeometryValidate, RejectsMlaWithVRowOrSeveralHeads) {
  KvGeometry g = valid_mla();
  g.v_head_dim = 128;
  expect_invalid(g, "'v_head_dim'");
  g = valid_mla();
  g.num_kv_heads = 2;
  expect_invalid(g, "latent head");
}

TEST(Names, DtypeAndAttentionKind) {
  EXPECT_EQ(l1_dtype_name(L1Dtype::kBf16), "bf16");
  EXPECT_EQ(l1_dtype_name(L1Dtype::kFp16), "fp16");
  EXPECT_EQ(l1_dtype_bytes(L1Dtype::kBf16), 2u);
  EXPECT_EQ(attention_kind_name(AttentionKind::kMha), "mha");
  EXPECT_EQ(attention_kind_name(AttentionKind::kMla), "mla");
}

}  // namespace
}  // namespace hiq

namespace hiq {
namespace {

TEST(KvGeometryValidate, RejectsHeadsThatDoNotAddUpOverTheRanks) {
  KvGeometry g = valid_mha();  // 2 heads per rank, 2 in all, tp 1
  g.tp_size = 2;               // 2 × 2 ≠ 2
  EXPECT_TRUE(contains(g.validate().message(), "total_kv_heads")) << g.validate().to_string();
  g.total_kv_heads = 4;
  EXPECT_TRUE(g.validate().is_ok()) << g.validate().to_string();
  g.num_kv_heads = 1;  // replicated: 1 per rank needs tp to be a multiple of the total
  g.total_kv_heads = 1;
  EXPECT_TRUE(g.validate().is_ok()) << g.validate().to_string();
  g.total_kv_heads = 3;
  EXPECT_FALSE(g.validate().is_ok());
}

}  // namespace
}  // namespace hiq
