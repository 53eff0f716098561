// tests/tiny_model.h — a tiny random Qwen3 (QK-norm, GQA, 3 layers, 48 wide)
// with F32 weights, and an L1 pool of its KV geometry, for tests of the
// forward pass and the model runner.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "codec/numeric.h"
#include "kv/model_config.h"
#include "model/cpu_forward.h"

namespace hiq::testing {

using cpu::MatrixView;
using cpu::VectorView;
using cpu::WeightType;

// The sizes of a random model; the defaults make the tiny one.
struct TinyModelSpec {
  int vocab_size = 97, hidden_size = 48, intermediate_size = 80, num_layers = 3;
  int num_heads = 4, num_kv_heads = 2, head_dim = 16;
  bool qk_norm = true;
  bool bf16_values = false;  // weights rounded to BF16 values (what a GPU upload keeps exactly)
};

// A tiny random Qwen3 (QK-norm, GQA) with F32 weights kept by the fixture.
struct TinyModel {
  ModelShape shape;
  CpuModelWeights weights;
  std::vector<std::vector<float>> storage;
  std::mt19937 rng{1234};
  bool bf16_values = false;
  TinyModelSpec spec;

  const float* tensor(size_t n, float scale, float offset = 0.0f) {
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> t(n);
    for (auto& x : t) {
      x = offset + normal(rng);
      if (bf16_values) x = numeric::bf16_to_float(numeric::float_to_bf16(x));
    }
    storage.push_back(std::move(t));
    return storage.back().data();
  }
  MatrixView matrix(int64_t rows, int64_t cols) {
    return {WeightType::kF32, tensor(static_cast<size_t>(rows * cols), 1.0f / std::sqrt(static_cast<float>(cols))),
            rows, cols};
  }
  VectorView norm(int64_t n) { return {WeightType::kF32, tensor(static_cast<size_t>(n), 0.1f, 1.0f), n}; }

  using Spec = TinyModelSpec;

  explicit TinyModel(const Spec& spec_in = {}) {
    spec = spec_in;
    bf16_values = spec.bf16_values;
    shape.vocab_size = spec.vocab_size;
    shape.hidden_size = spec.hidden_size;
    shape.intermediate_size = spec.intermediate_size;
    shape.num_layers = spec.num_layers;
    shape.num_heads = spec.num_heads;
    shape.num_kv_heads = spec.num_kv_heads;
    shape.head_dim = spec.head_dim;
    shape.qk_norm = spec.qk_norm;
    shape.rope = *make_rope_table(shape.head_dim, 10000.0, {}, 4096);
    storage.reserve(static_cast<size_t>(16 * shape.num_layers + 8));
    weights.embed_tokens = matrix(shape.vocab_size, shape.hidden_size);
    for (int i = 0; i < shape.num_layers; ++i) {
      LayerWeights l;
      l.input_norm = norm(shape.hidden_size);
      l.q_proj = matrix(shape.num_heads * shape.head_dim, shape.hidden_size);
      l.k_proj = matrix(shape.num_kv_heads * shape.head_dim, shape.hidden_size);
      l.v_proj = matrix(shape.num_kv_heads * shape.head_dim, shape.hidden_size);
      if (shape.qk_norm) {
        l.q_norm = norm(shape.head_dim);
        l.k_norm = norm(shape.head_dim);
      }
      l.o_proj = matrix(shape.hidden_size, shape.num_heads * shape.head_dim);
      l.post_attention_norm = norm(shape.hidden_size);
      l.gate_proj = matrix(shape.intermediate_size, shape.hidden_size);
      l.up_proj = matrix(shape.intermediate_size, shape.hidden_size);
      l.down_proj = matrix(shape.hidden_size, shape.intermediate_size);
      weights.layers.push_back(l);
    }
    weights.final_norm = norm(shape.hidden_size);
    weights.lm_head = matrix(shape.vocab_size, shape.hidden_size);
  }

  // The KV geometry of the default model (static: tests use it without one).
  static KvGeometry geometry() { return geometry_of(Spec{}); }
  static KvGeometry geometry_of(const Spec& s) {
    return *geometry_from_config_json(
        "{\"model_type\": \"qwen3\", \"num_hidden_layers\": " + std::to_string(s.num_layers) +
            ", \"num_attention_heads\": " + std::to_string(s.num_heads) +
            ", \"num_key_value_heads\": " + std::to_string(s.num_kv_heads) +
            ", \"head_dim\": " + std::to_string(s.head_dim) +
            ", \"hidden_size\": " + std::to_string(s.hidden_size) + "}",
        "tiny");
  }
  // Greedy generation of `prompt` on a fresh pool, one token per step: what
  // the model generates alone, from scratch (empty if the forward pass fails,
  // so the caller's comparison fails).
  std::vector<int32_t> generate_alone(const std::vector<int32_t>& prompt, int new_tokens) const {
    auto l1 = pool(prompt.size() + static_cast<size_t>(new_tokens));
    std::vector<int32_t> tokens = prompt;
    std::vector<SlotId> slots(prompt.size() + static_cast<size_t>(new_tokens));
    for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<SlotId>(i);
    std::vector<int32_t> out;
    size_t first_new = 0;
    for (int i = 0; i < new_tokens; ++i) {
      auto logits = cpu_forward(shape, weights, *l1, tokens, std::span(slots).first(tokens.size()), first_new);
      if (!logits) return {};
      out.push_back(static_cast<int32_t>(std::max_element(logits->begin(), logits->end()) - logits->begin()));
      first_new = tokens.size();
      tokens.push_back(out.back());
    }
    return out;
  }

  // An L1 pool of this model's geometry in host memory.
  std::unique_ptr<DeviceKvPool> pool(size_t slots = 64) const {
    return std::move(*make_host_memory_device_pool(geometry_of(spec), slots));
  }
};

// Qwen3-8B's shape (no weights): for tests of sizes, splits and counts.
inline ModelShape qwen3_8b_shape() {
  ModelShape s;
  s.vocab_size = 151936;
  s.hidden_size = 4096;
  s.intermediate_size = 12288;
  s.num_layers = 36;
  s.num_heads = 32;
  s.num_kv_heads = 8;
  s.head_dim = 128;
  return s;
}

// A Qwen3-shaped random model at the real head_dim (128) and GQA group (4),
// its weights BF16 values (what a GPU upload keeps exactly).
inline TinyModelSpec qwen3_like() {
  TinyModelSpec spec;
  spec.vocab_size = 512;
  spec.hidden_size = 256;
  spec.intermediate_size = 512;
  spec.num_layers = 2;
  spec.num_heads = 8;
  spec.num_kv_heads = 2;
  spec.head_dim = 128;
  spec.bf16_values = true;
  return spec;
}

// n token ids drawn uniformly from [0, vocab) (seeded).
inline std::vector<int32_t> random_tokens(size_t n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = pick(rng);
  return t;
}

// The L1 slots first, first + 1, …, first + n − 1.
inline std::vector<SlotId> iota_slots(size_t n, SlotId first = 0) {
  std::vector<SlotId> s(n);
  std::iota(s.begin(), s.end(), first);
  return s;
}

}  // namespace hiq::testing
