// tests/tiny_model.h — a tiny random Qwen3 (QK-norm, GQA, 3 layers, 48 wide)
// with F32 weights, and an L1 pool of its KV geometry, for tests of the
// forward pass and the model runner.
#pragma once

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "kv/model_config.h"
#include "model/cpu_forward.h"

namespace hiq::testing {

using cpu::MatrixView;
using cpu::VectorView;
using cpu::WeightType;

// A tiny random Qwen3 (QK-norm, GQA) with F32 weights kept by the fixture.
struct TinyModel {
  ModelShape shape;
  CpuModelWeights weights;
  std::vector<std::vector<float>> storage;
  std::mt19937 rng{1234};

  const float* tensor(size_t n, float scale, float offset = 0.0f) {
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> t(n);
    for (auto& x : t) x = offset + normal(rng);
    storage.push_back(std::move(t));
    return storage.back().data();
  }
  MatrixView matrix(int64_t rows, int64_t cols) {
    return {WeightType::kF32, tensor(static_cast<size_t>(rows * cols), 1.0f / std::sqrt(static_cast<float>(cols))),
            rows, cols};
  }
  VectorView norm(int64_t n) { return {WeightType::kF32, tensor(static_cast<size_t>(n), 0.1f, 1.0f), n}; }

  TinyModel() {
    shape.vocab_size = 97;
    shape.hidden_size = 48;
    shape.intermediate_size = 80;
    shape.num_layers = 3;
    shape.num_heads = 4;
    shape.num_kv_heads = 2;
    shape.head_dim = 16;
    shape.qk_norm = true;
    shape.rope = *make_rope_table(shape.head_dim, 10000.0, {}, 4096);
    storage.reserve(64);
    weights.embed_tokens = matrix(shape.vocab_size, shape.hidden_size);
    for (int i = 0; i < shape.num_layers; ++i) {
      LayerWeights l;
      l.input_norm = norm(shape.hidden_size);
      l.q_proj = matrix(shape.num_heads * shape.head_dim, shape.hidden_size);
      l.k_proj = matrix(shape.num_kv_heads * shape.head_dim, shape.hidden_size);
      l.v_proj = matrix(shape.num_kv_heads * shape.head_dim, shape.hidden_size);
      l.q_norm = norm(shape.head_dim);
      l.k_norm = norm(shape.head_dim);
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

  static KvGeometry geometry() {
    return *geometry_from_config_json(
        R"({"model_type": "qwen3", "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 16, "hidden_size": 48})",
        "tiny");
  }
  std::unique_ptr<DeviceKvPool> pool(size_t slots = 64) const {
    return std::move(*make_host_memory_device_pool(geometry(), slots));
  }
};

}  // namespace hiq::testing
