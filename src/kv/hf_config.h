// kv/hf_config.h — the one parser of a Hugging Face config.json.
//
// Every reader of config.json goes through `parse_hf_config`: the KV geometry
// (kv/model_config.h: `hiq layout`, `sim`, `bench`) and the served model's
// architecture (model/model_config.h) both derive from the `HfConfig` it
// returns, so a config cannot mean two things to two modules. Defaults that
// transformers fills in are decided here, once:
//   head_dim  qwen3: 128 (Qwen3Config's default, whatever hidden_size says);
//             qwen2, llama, mistral: hidden_size / num_attention_heads
//   num_key_value_heads  num_attention_heads
//   dtype     "dtype" (transformers 5), else "torch_dtype", else bfloat16
//
// The parser refuses only what is malformed (missing or mistyped fields, heads
// that do not divide, a model_type it does not know). What a consumer does not
// implement — a rope type, sliding windows, experts, quantization — is recorded
// here and refused by that consumer: `hiq layout` can size a DeepSeek-V3 cache
// that the model runtime would not serve.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace hiq {

// The `model_type`s understood.
enum class ModelFamily : uint8_t { kQwen3, kQwen2, kLlama, kMistral, kDeepseekV2, kDeepseekV3 };
std::string_view model_family_name(ModelFamily family);  // the model_type, e.g. "qwen3"
// DeepSeek-V2/V3 cache one latent row per layer (multi-head latent attention).
bool is_mla_family(ModelFamily family);

// The dtype the checkpoint was saved in. Informational: every safetensors
// tensor records its own, and the runtime's L1 dtype is a GeometryOptions
// choice, not the checkpoint's.
enum class CheckpointDtype : uint8_t { kBf16, kF16, kF32 };
std::string_view checkpoint_dtype_name(CheckpointDtype dtype);  // "bfloat16", "float16", "float32"

// The RoPE dictionary: `rope_scaling` (transformers 4.x) or `rope_parameters`
// (5.x); `rope_scaling` wins when both are set, as in transformers. Parameters
// are read for the types whose formulas are known (llama3, yarn); absent ones
// stay nullopt, and the consumer decides which it requires.
struct HfRopeConfig {
  std::string field;              // "rope_scaling" or "rope_parameters"; empty: neither (plain RoPE)
  std::string type = "default";   // rope_type, or the legacy `type` key
  std::string unknown_key;        // first key the type does not define (one a consumer would ignore); "" if none
  std::optional<double> factor;             // llama3, yarn
  std::optional<double> low_freq_factor;    // llama3
  std::optional<double> high_freq_factor;   // llama3
  std::optional<int> original_max_position_embeddings;  // llama3, yarn
  std::optional<double> beta_fast, beta_slow, mscale, mscale_all_dim;  // yarn
  bool truncate = true;                     // yarn: truncated correction bounds
  std::optional<double> partial_rotary_factor;  // inside the dictionary (transformers 5)
};

struct HfConfig {
  std::string source;                        // the file path or preset name, for errors
  ModelFamily family = ModelFamily::kQwen3;  // from model_type

  // Attention shape: what the KV geometry needs.
  int num_layers = 0;            // num_hidden_layers
  int hidden_size = 0;           // 0 when absent (only MLA configs may omit it)
  int num_attention_heads = 0;   // query heads; 0 when absent (only MLA configs may omit it)
  int num_kv_heads = 0;          // num_key_value_heads, default num_attention_heads; divides it
  int head_dim = 0;              // MHA/GQA: K and V head dim (defaults above); 0 for MLA
  int kv_lora_rank = 0;          // MLA: compressed KV width; 0 otherwise
  int qk_rope_head_dim = 0;      // MLA: decoupled RoPE key width; 0 otherwise
  CheckpointDtype dtype = CheckpointDtype::kBf16;

  // The rest of the decoder, for a runtime that runs it. Sizes are 0 when absent.
  int vocab_size = 0;
  int intermediate_size = 0;
  int max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;   // top level, or inside the RoPE dictionary (which wins)
  HfRopeConfig rope;
  bool tie_word_embeddings = false;
  bool attention_bias = false;

  // Features that change the computation, as the config states them.
  std::string hidden_act = "silu";
  bool mlp_bias = false;
  bool quantized = false;                      // a quantization_config is present
  std::string moe_field;                       // first mixture-of-experts field with a non-zero value; "" if none
  std::optional<double> partial_rotary_factor; // top level
  bool use_sliding_window = false;
  bool sliding_window_set = false;             // `sliding_window` present and not null
  std::string non_full_attention_layer;        // first `layer_types` entry other than full_attention; "" if none
};

// Parses config.json text; `source` names it in errors, which read
// "<source>: field '<name>' <problem>".
Result<HfConfig> parse_hf_config(std::string_view json_text, std::string_view source);
// Reads a config.json file, or the config.json of a model directory.
Result<HfConfig> read_hf_config(const std::string& path);

}  // namespace hiq
