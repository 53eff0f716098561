// A model directory end to end: the tiny Qwen3 written as a Hugging Face
// checkpoint (config.json + model.safetensors, transformers' tensor names),
// loaded, bound and run, gives bit for bit the logits of the same weights in
// memory; a directory that is not a model is a clear error.
#include <gtest/gtest.h>

#include <cstring>

#include "model/loaded_model.h"
#include "safetensors_writer.h"
#include "tiny_model.h"

namespace hiq {
namespace {

using testing::TinyModel;
using testing::WriterTensor;

constexpr const char* kTinyConfig = R"({
  "model_type": "qwen3", "vocab_size": 97, "hidden_size": 48, "intermediate_size": 80,
  "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
  "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 4096,
  "tie_word_embeddings": false, "torch_dtype": "float32"})";

WriterTensor f32(std::string name, const void* data, std::vector<int64_t> shape) {
  WriterTensor t{std::move(name), "F32", std::move(shape), {}};
  t.data.resize(static_cast<size_t>(testing::element_count(t.shape)) * 4);
  std::memcpy(t.data.data(), data, t.data.size());
  return t;
}
WriterTensor f32(std::string name, const cpu::MatrixView& m) { return f32(std::move(name), m.data, {m.rows, m.cols}); }
WriterTensor f32(std::string name, const cpu::VectorView& v) { return f32(std::move(name), v.data, {v.size}); }

std::vector<WriterTensor> checkpoint_tensors(const TinyModel& m) {
  std::vector<WriterTensor> t;
  t.push_back(f32("model.embed_tokens.weight", m.weights.embed_tokens));
  for (size_t i = 0; i < m.weights.layers.size(); ++i) {
    const LayerWeights& l = m.weights.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    t.push_back(f32(p + "input_layernorm.weight", l.input_norm));
    t.push_back(f32(p + "self_attn.q_proj.weight", l.q_proj));
    t.push_back(f32(p + "self_attn.k_proj.weight", l.k_proj));
    t.push_back(f32(p + "self_attn.v_proj.weight", l.v_proj));
    t.push_back(f32(p + "self_attn.q_norm.weight", l.q_norm));
    t.push_back(f32(p + "self_attn.k_norm.weight", l.k_norm));
    t.push_back(f32(p + "self_attn.o_proj.weight", l.o_proj));
    t.push_back(f32(p + "post_attention_layernorm.weight", l.post_attention_norm));
    t.push_back(f32(p + "mlp.gate_proj.weight", l.gate_proj));
    t.push_back(f32(p + "mlp.up_proj.weight", l.up_proj));
    t.push_back(f32(p + "mlp.down_proj.weight", l.down_proj));
  }
  t.push_back(f32("model.norm.weight", m.weights.final_norm));
  t.push_back(f32("lm_head.weight", m.weights.lm_head));
  return t;
}

TEST(LoadedModel, ACheckpointOnDiskRunsExactlyLikeTheSameWeightsInMemory) {
  TinyModel m;
  testing::TempDir dir;
  testing::write_text(dir.path() / "config.json", kTinyConfig);
  testing::write_safetensors(dir.path() / "model.safetensors", checkpoint_tensors(m));
  auto loaded = LoadedModel::load(dir.path().string());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  EXPECT_EQ((*loaded)->shape().num_layers, 3);
  EXPECT_TRUE((*loaded)->shape().qk_norm);

  const std::vector<int32_t> tokens = {5, 17, 90, 3, 3, 41, 77, 12};
  std::vector<SlotId> slots(tokens.size());
  for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<SlotId>(i);
  auto a_pool = m.pool(), b_pool = m.pool();
  auto a = cpu_forward(m.shape, m.weights, *a_pool, tokens, slots, 0, true);
  auto b = cpu_forward((*loaded)->shape(), (*loaded)->weights(), *b_pool, tokens, slots, 0, true);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(*a, *b);
}

TEST(LoadedModel, ADirectoryThatIsNotAModelIsAClearError) {
  testing::TempDir dir;
  auto none = LoadedModel::load(dir.path().string());
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("config.json"), std::string::npos) << none.status().message();
  // A config without weights.
  testing::write_text(dir.path() / "config.json", kTinyConfig);
  auto no_weights = LoadedModel::load(dir.path().string());
  ASSERT_FALSE(no_weights.is_ok());
  EXPECT_NE(no_weights.status().message().find("safetensors"), std::string::npos) << no_weights.status().message();
}

}  // namespace
}  // namespace hiq
