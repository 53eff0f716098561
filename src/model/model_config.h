// model/model_config.h — the architecture of a Qwen3-family model, derived
// from a Hugging Face config.json as kv/hf_config.h parses it (the one
// config.json parser: head_dim, KV heads and dtype mean here what they mean to
// the KV geometry).
//
// Served `model_type`s (one decoder shape: RMSNorm, GQA attention with RoPE,
// SwiGLU MLP), with the differences transformers gives them:
//   qwen3    RMSNorm of every q and k head before RoPE (q_norm, k_norm);
//            `attention_bias` adds a bias to q, k, v and o
//   qwen2    a bias on q, k and v always, none on o
//   llama    `attention_bias` adds a bias to q, k, v and o
//   mistral  no bias at all (transformers ignores `attention_bias` for it)
//
// What would change the computation and is not implemented is refused at
// load with the field named, never ignored: rope_scaling other than llama3 or
// yarn, sliding-window attention, mixture-of-experts fields, an activation
// other than silu, an MLP bias, partial rotary embeddings, quantized weights.
// RoPE parameters are read from `rope_theta` + `rope_scaling` (transformers
// 4.x) or from `rope_parameters` (5.x).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "kv/geometry.h"
#include "kv/hf_config.h"
#include "model/rope.h"
#include "model/safetensors.h"

namespace hiq {

enum class ModelArchitecture : uint8_t { kQwen3, kQwen2, kLlama, kMistral };
// The Hugging Face model_type: "qwen3", "qwen2", "llama", "mistral".
std::string_view model_architecture_name(ModelArchitecture architecture);

struct ModelConfig {
  std::string source;                                 // the config.json path (or a name), for errors
  ModelArchitecture architecture = ModelArchitecture::kQwen3;  // from model_type
  int vocab_size = 0;                                 // rows of embed_tokens and lm_head
  int hidden_size = 0;                                // width of the residual stream
  int intermediate_size = 0;                          // width of the SwiGLU MLP (gate and up outputs)
  int num_layers = 0;                                 // num_hidden_layers: decoder layers
  int num_attention_heads = 0;                        // query heads
  int num_kv_heads = 0;                               // num_key_value_heads; divides num_attention_heads (GQA)
  int head_dim = 0;                                   // of q, k and v heads; even (RoPE rotates pairs)
  double rms_norm_eps = 1e-6;                         // added to the mean square in every RMSNorm
  double rope_theta = 10000.0;                        // RoPE base
  RopeScaling rope_scaling;                           // kNone unless the config asks for llama3 or yarn
  int max_position_embeddings = 0;                    // positions the model was trained for
  bool tie_word_embeddings = false;                   // lm_head reuses embed_tokens (no lm_head.weight)
  bool qk_norm = false;                               // q_norm/k_norm RMSNorm per head before RoPE (qwen3)
  bool qkv_bias = false;                              // q_proj, k_proj and v_proj carry a bias
  bool o_bias = false;                                // o_proj carries a bias
  TensorDtype torch_dtype = TensorDtype::kBf16;       // dtype the checkpoint was saved in ("dtype"/"torch_dtype";
                                                      // informational: every tensor records its own)

  // The longest sequence (prompt + output) the model takes: max_position_embeddings,
  // or for yarn factor × original_max_position_embeddings (max_position_embeddings
  // when the config has no original), as vLLM and SGLang derive it. llama3's
  // max_position_embeddings already counts its scaling.
  int64_t context_length() const;

  int q_width() const { return num_attention_heads * head_dim; }  // rows of q_proj
  int kv_width() const { return num_kv_heads * head_dim; }        // rows of k_proj and v_proj

  // Every field and their consistency; the error names the source and field.
  Status validate() const;

  // The KV cache this model writes: every layer caches K and V rows of
  // num_kv_heads × head_dim, in a BF16 L1 (the runtime stores activations in
  // BF16 whatever the checkpoint's dtype). One TP rank. Built by the kv
  // module's mha_kv_geometry, so it equals geometry_from_config_json of the
  // same config. The config must be valid and page_size in [1, kMaxPageSize]
  // (checked).
  KvGeometry kv_geometry(int page_size = 1) const;
};

// The model of a parsed config: refuses a model_type the runtime does not run,
// any feature that would change the computation and is not implemented, and
// missing decoder fields (vocab_size, hidden_size, intermediate_size). The
// result is validated.
Result<ModelConfig> model_config_from_hf_config(const HfConfig& config);
// Parses config.json text (parse_hf_config); `source` names it in errors.
Result<ModelConfig> model_config_from_json(std::string_view json_text, std::string_view source);
// Reads a config.json file, or the config.json of a model directory.
Result<ModelConfig> model_config_from_file(const std::string& path);

}  // namespace hiq
