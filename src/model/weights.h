// model/weights.h — the tensors a Qwen3-family architecture needs, and their
// binding to a checkpoint: every expected tensor found with the right shape,
// nothing unexpected left over.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/checkpoint.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace hiq {

struct TensorSpec {
  std::string name;            // as transformers names it, e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // PyTorch order
  bool operator==(const TensorSpec&) const = default;
};

// Every tensor `config` needs, in checkpoint order: the embedding, each layer,
// the final norm, and lm_head.weight unless the embeddings are tied.
std::vector<TensorSpec> expected_tensors(const ModelConfig& config);

// Views of a model's weights inside a Checkpoint, in the dtypes it stores
// (BF16, F16 or F32, recorded per view; they may differ between tensors).
// Every view points into the Checkpoint's mappings: the Checkpoint must
// outlive the ModelWeights.
//
// Matrices are row-major [out features, in features], as PyTorch's Linear
// stores them: y = W·x reads row i of W for output i. The rows of q_proj,
// k_proj and v_proj are grouped by head (row h·head_dim + d is element d of
// head h), and within a head the checkpoint uses transformers' RoPE layout:
// element d pairs with d + head_dim/2 (rotate_half), not with d + 1.
struct ModelWeights {
  struct Layer {
    TensorView input_layernorm;              // [hidden]: RMSNorm weight before attention
    TensorView q_proj;                       // [heads·head_dim, hidden]
    TensorView k_proj;                       // [kv_heads·head_dim, hidden]
    TensorView v_proj;                       // [kv_heads·head_dim, hidden]
    std::optional<TensorView> q_proj_bias;   // [heads·head_dim]; when config.qkv_bias
    std::optional<TensorView> k_proj_bias;   // [kv_heads·head_dim]; when config.qkv_bias
    std::optional<TensorView> v_proj_bias;   // [kv_heads·head_dim]; when config.qkv_bias
    std::optional<TensorView> q_norm;        // [head_dim]: RMSNorm of each query head before RoPE; when config.qk_norm
    std::optional<TensorView> k_norm;        // [head_dim]: RMSNorm of each key head before RoPE; when config.qk_norm
    TensorView o_proj;                       // [hidden, heads·head_dim]
    std::optional<TensorView> o_proj_bias;   // [hidden]; when config.o_bias
    TensorView post_attention_layernorm;     // [hidden]: RMSNorm weight before the MLP
    TensorView gate_proj;                    // [intermediate, hidden]: SiLU(gate·x) ⊙ (up·x)
    TensorView up_proj;                      // [intermediate, hidden]
    TensorView down_proj;                    // [hidden, intermediate]
  };

  TensorView embed_tokens;   // [vocab, hidden]: row t is the embedding of token t
  std::vector<Layer> layers; // config.num_layers of them, in order
  TensorView final_norm;     // [hidden]: model.norm.weight, before lm_head
  TensorView lm_head;        // [vocab, hidden]: logits = lm_head · h; the embed_tokens view when tied
};

// Finds every tensor of expected_tensors(config) in `checkpoint` and checks
// its shape. Errors, each naming the checkpoint or file and the tensors (up to
// eight, then a count):
//   kNotFound         tensors the architecture needs are missing
//   kInvalidArgument  tensors the architecture does not use are present
//                     (rotary_emb.inv_freq buffers excepted: transformers
//                     recomputes them), or a tensor has the wrong shape
Result<ModelWeights> bind_weights(const ModelConfig& config, const Checkpoint& checkpoint);

}  // namespace hiq
