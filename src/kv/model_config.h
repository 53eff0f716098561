// kv/model_config.h — KvGeometry from a Hugging Face `config.json` (parsed by
// kv/hf_config.h, the one config.json parser), or from a built-in preset (an
// embedded copy of a well-known model's config.json).
//
// Supported `model_type`s: qwen3, qwen2, llama, mistral (MHA/GQA) and
// deepseek_v2, deepseek_v3 (MLA). Every error names the source (file path or
// preset) and the field at fault.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kv/geometry.h"
#include "kv/hf_config.h"

namespace hiq {

struct GeometryOptions {
  int tp_size = 1;                      // tensor-parallel ranks (--tp); KV heads are split over them
  int page_size = 1;                    // tokens per page (--page-size)
  // L1 element type. BF16 whatever the checkpoint's dtype: the model runtime
  // converts float16 and float32 weights at load and writes BF16 KV, and the
  // L2 codecs read BF16 rows. FP16 describes an engine that keeps an FP16 L1.
  L1Dtype l1_dtype = L1Dtype::kBf16;

  Status validate() const;  // tp_size positive, page_size in [1, kMaxPageSize]
};

// The geometry of a parsed config: MHA/GQA models cache num_key_value_heads ×
// head_dim K and V rows per layer, split over TP ranks; MLA models one latent
// row of kv_lora_rank + qk_rope_head_dim, replicated on every rank.
Result<KvGeometry> geometry_from_hf_config(const HfConfig& config, const GeometryOptions& options = {});

// The geometry of an MHA/GQA model of that shape; geometry_from_hf_config and
// the model runtime's ModelConfig::kv_geometry both build theirs with it.
// `name` names the model in reports and errors.
Result<KvGeometry> mha_kv_geometry(std::string_view name, int num_layers, int total_kv_heads, int head_dim,
                                   const GeometryOptions& options = {});

// Parses config.json text. `source` names it in errors (a path or a preset name).
Result<KvGeometry> geometry_from_config_json(std::string_view json_text, std::string_view source,
                                             const GeometryOptions& options = {});

// Reads and parses a config.json file (or a model directory holding one).
Result<KvGeometry> geometry_from_config_file(const std::string& path, const GeometryOptions& options = {});

// Names of the built-in presets, e.g. "qwen3-8b", "llama-3.1-8b", "deepseek-v3".
std::vector<std::string_view> model_preset_names();
// The embedded config.json of a preset, or nullopt when there is none of that name.
std::optional<std::string_view> model_preset_config(std::string_view name);

// `--model` resolution: a preset name, else a config.json path or model directory.
Result<KvGeometry> resolve_model_geometry(const std::string& model, const GeometryOptions& options = {});

}  // namespace hiq
