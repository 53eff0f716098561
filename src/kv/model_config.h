// kv/model_config.h — KvGeometry from a Hugging Face `config.json`, or from a
// built-in preset (an embedded copy of a well-known model's config.json).
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

namespace hiq {

struct GeometryOptions {
  int tp_size = 1;                      // tensor-parallel ranks (--tp); KV heads are split over them
  int page_size = 1;                    // tokens per page (--page-size)
  // L1 element type. Default: from the config's "dtype" (newer transformers) or
  // else "torch_dtype": float16 → fp16; bfloat16, float32 or absent → bf16 (a
  // float32 checkpoint is served with a BF16 L1).
  std::optional<L1Dtype> l1_dtype;
};

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
