#include "kv/model_config.h"

#include <array>
#include <cstdint>
#include <filesystem>

#include "kv/config_reader.h"

namespace hiq {
namespace {

// Embedded copies of the attention-relevant part of well-known configs. They go
// through the same parser as files on disk, so presets test the parser too.
struct Preset {
  std::string_view name;
  std::string_view config_json;
};

constexpr std::array<Preset, 9> kPresets{{
    {"qwen3-8b", R"({"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096,
      "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "torch_dtype": "bfloat16"})"},
    {"qwen3-32b", R"({"model_type": "qwen3", "num_hidden_layers": 64, "hidden_size": 5120,
      "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "torch_dtype": "bfloat16"})"},
    {"qwen3-0.6b", R"({"model_type": "qwen3", "num_hidden_layers": 28, "hidden_size": 1024,
      "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "torch_dtype": "bfloat16"})"},
    {"qwen2.5-7b", R"({"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584,
      "num_attention_heads": 28, "num_key_value_heads": 4, "torch_dtype": "bfloat16"})"},
    {"llama-3.1-8b", R"({"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
      "num_attention_heads": 32, "num_key_value_heads": 8, "torch_dtype": "bfloat16"})"},
    {"llama-3.1-70b", R"({"model_type": "llama", "num_hidden_layers": 80, "hidden_size": 8192,
      "num_attention_heads": 64, "num_key_value_heads": 8, "torch_dtype": "bfloat16"})"},
    {"mistral-7b", R"({"model_type": "mistral", "num_hidden_layers": 32, "hidden_size": 4096,
      "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "torch_dtype": "bfloat16"})"},
    {"deepseek-v2-lite", R"({"model_type": "deepseek_v2", "num_hidden_layers": 27, "hidden_size": 2048,
      "num_attention_heads": 16, "num_key_value_heads": 16, "kv_lora_rank": 512,
      "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "torch_dtype": "bfloat16"})"},
    {"deepseek-v3", R"({"model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168,
      "num_attention_heads": 128, "num_key_value_heads": 128, "kv_lora_rank": 512,
      "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "torch_dtype": "bfloat16"})"},
}};

}  // namespace

Status GeometryOptions::validate() const {
  if (tp_size <= 0) return invalid_argument("--tp must be a positive integer (got " + std::to_string(tp_size) + ")");
  if (page_size <= 0 || page_size > kMaxPageSize)
    return invalid_argument("--page-size must be an integer from 1 to " + std::to_string(kMaxPageSize) + " (got " +
                            std::to_string(page_size) + ")");
  return Status::ok();
}

Result<KvGeometry> mha_kv_geometry(std::string_view name, int num_layers, int total_kv_heads, int head_dim,
                                   const GeometryOptions& options) {
  HIQ_RETURN_IF_ERROR(options.validate());
  KvGeometry g;
  g.name = std::string(name);
  g.num_layers = num_layers;
  g.attention = AttentionKind::kMha;
  g.total_kv_heads = total_kv_heads;
  g.k_head_dim = head_dim;
  g.v_head_dim = head_dim;
  g.page_size = options.page_size;
  g.tp_size = options.tp_size;
  g.l1_dtype = options.l1_dtype;
  // Split KV heads over TP ranks; with more ranks than heads each rank holds a
  // replica of one head (as SGLang and vLLM do).
  const int tp = options.tp_size;
  if (total_kv_heads > 0 && total_kv_heads % tp == 0) {
    g.num_kv_heads = total_kv_heads / tp;
  } else if (total_kv_heads > 0 && tp % total_kv_heads == 0) {
    g.num_kv_heads = 1;
  } else {
    return invalid_argument(std::string(name) + ": --tp " + std::to_string(tp) +
                            " neither divides nor is a multiple of num_key_value_heads (" +
                            std::to_string(total_kv_heads) + ")");
  }
  HIQ_RETURN_IF_ERROR(g.validate().with_context(name));
  return g;
}

Result<KvGeometry> geometry_from_hf_config(const HfConfig& config, const GeometryOptions& options) {
  if (!is_mla_family(config.family))
    return mha_kv_geometry(config.source, config.num_layers, config.num_kv_heads, config.head_dim, options);
  HIQ_RETURN_IF_ERROR(options.validate());
  // One latent vector (compressed KV plus the decoupled RoPE key) per token and
  // layer, replicated on every TP rank.
  KvGeometry g;
  g.name = config.source;
  g.num_layers = config.num_layers;
  g.attention = AttentionKind::kMla;
  g.num_kv_heads = 1;
  g.total_kv_heads = 1;
  g.k_head_dim = config.kv_lora_rank + config.qk_rope_head_dim;
  g.v_head_dim = 0;
  g.page_size = options.page_size;
  g.tp_size = options.tp_size;
  g.l1_dtype = options.l1_dtype;
  HIQ_RETURN_IF_ERROR(g.validate().with_context(config.source));
  return g;
}

Result<KvGeometry> geometry_from_config_json(std::string_view json_text, std::string_view source,
                                             const GeometryOptions& options) {
  HIQ_ASSIGN_OR_RETURN(HfConfig config, parse_hf_config(json_text, source));
  return geometry_from_hf_config(config, options);
}

Result<KvGeometry> geometry_from_config_file(const std::string& path, const GeometryOptions& options) {
  auto file = read_config_file(path);
  if (!file.is_ok()) {
    // `--model` takes a preset name too: say so when nothing of that name exists.
    if (file.status().code() == StatusCode::kNotFound && file.status().message().ends_with(": no such file"))
      return not_found(file.status().message() + " (nor a model preset)");
    return file.status();
  }
  return geometry_from_config_json(file->text, file->path, options);
}

std::vector<std::string_view> model_preset_names() {
  std::vector<std::string_view> names;
  for (const Preset& p : kPresets) names.push_back(p.name);
  return names;
}

std::optional<std::string_view> model_preset_config(std::string_view name) {
  for (const Preset& p : kPresets)
    if (p.name == name) return p.config_json;
  return std::nullopt;
}

Result<KvGeometry> resolve_model_geometry(const std::string& model, const GeometryOptions& options) {
  if (auto preset = model_preset_config(model)) return geometry_from_config_json(*preset, model, options);
  std::error_code ec;
  if (model.find('/') == std::string::npos && model.find(".json") == std::string::npos &&
      !std::filesystem::exists(model, ec)) {
    std::string names;
    for (std::string_view n : model_preset_names()) names += (names.empty() ? "" : ", ") + std::string(n);
    return not_found("unknown model '" + model + "': not a preset (" + names + ") nor a config.json path");
  }
  return geometry_from_config_file(model, options);
}

}  // namespace hiq
