#include "kv/model_config.h"

#include <array>
#include <cstdint>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "kv/config_reader.h"

namespace hiq {
namespace {

using nlohmann::json;

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

bool is_mla_model(std::string_view model_type) {
  return model_type == "deepseek_v2" || model_type == "deepseek_v3";
}
bool is_mha_model(std::string_view model_type) {
  return model_type == "qwen3" || model_type == "qwen2" || model_type == "llama" || model_type == "mistral";
}

Result<L1Dtype> l1_dtype_from_config(const ConfigReader& reader) {
  // Newer transformers write "dtype", older ones "torch_dtype".
  for (std::string_view field : {"dtype", "torch_dtype"}) {
    if (!reader.has(field)) continue;
    HIQ_ASSIGN_OR_RETURN(std::string dtype, reader.string(field));
    if (dtype == "float16") return L1Dtype::kFp16;
    if (dtype == "bfloat16" || dtype == "float32") return L1Dtype::kBf16;
    return reader.error(field, "names an unsupported dtype '" + dtype + "' (expected bfloat16, float16 or float32)");
  }
  return L1Dtype::kBf16;
}

}  // namespace

Result<KvGeometry> geometry_from_config_json(std::string_view json_text, std::string_view source,
                                             const GeometryOptions& options) {
  json config = json::parse(json_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded())
    return invalid_argument(std::string(source) + ": not valid JSON");
  if (!config.is_object()) return invalid_argument(std::string(source) + ": expected a JSON object");
  const ConfigReader reader(config, source);

  if (options.tp_size <= 0)
    return invalid_argument("--tp must be a positive integer (got " + std::to_string(options.tp_size) + ")");
  if (options.page_size <= 0 || options.page_size > kMaxPageSize)
    return invalid_argument("--page-size must be an integer from 1 to " + std::to_string(kMaxPageSize) + " (got " +
                            std::to_string(options.page_size) + ")");

  HIQ_ASSIGN_OR_RETURN(std::string model_type, reader.string("model_type"));
  KvGeometry g;
  g.name = std::string(source);
  g.page_size = options.page_size;
  g.tp_size = options.tp_size;
  HIQ_ASSIGN_OR_RETURN(g.num_layers, reader.positive_int("num_hidden_layers"));
  if (options.l1_dtype) {
    g.l1_dtype = *options.l1_dtype;
  } else {
    HIQ_ASSIGN_OR_RETURN(g.l1_dtype, l1_dtype_from_config(reader));
  }

  if (is_mla_model(model_type)) {
    // One latent vector (compressed KV plus the decoupled RoPE key) per token and
    // layer, replicated on every TP rank.
    HIQ_ASSIGN_OR_RETURN(int kv_lora_rank, reader.positive_int("kv_lora_rank"));
    HIQ_ASSIGN_OR_RETURN(int rope_dim, reader.positive_int("qk_rope_head_dim"));
    g.attention = AttentionKind::kMla;
    g.num_kv_heads = 1;
    g.total_kv_heads = 1;
    g.k_head_dim = kv_lora_rank + rope_dim;
    g.v_head_dim = 0;
  } else if (is_mha_model(model_type)) {
    HIQ_ASSIGN_OR_RETURN(int num_heads, reader.positive_int("num_attention_heads"));
    HIQ_ASSIGN_OR_RETURN(int num_kv_heads, reader.optional_positive_int("num_key_value_heads", num_heads));
    if (num_heads % num_kv_heads != 0)
      return reader.error("num_key_value_heads", "(" + std::to_string(num_kv_heads) +
                                                     ") must divide num_attention_heads (" +
                                                     std::to_string(num_heads) + ")");
    int head_dim = 0;
    if (reader.has("head_dim")) {
      HIQ_ASSIGN_OR_RETURN(head_dim, reader.positive_int("head_dim"));
    } else {
      HIQ_ASSIGN_OR_RETURN(int hidden, reader.positive_int("hidden_size"));
      if (hidden % num_heads != 0)
        return reader.error("hidden_size", "(" + std::to_string(hidden) +
                                               ") is not a multiple of num_attention_heads (" +
                                               std::to_string(num_heads) + ") and 'head_dim' is absent");
      head_dim = hidden / num_heads;
    }
    g.attention = AttentionKind::kMha;
    g.total_kv_heads = num_kv_heads;
    g.k_head_dim = head_dim;
    g.v_head_dim = head_dim;
    // Split KV heads over TP ranks; with more ranks than heads each rank holds a
    // replica of one head (as SGLang and vLLM do).
    const int tp = options.tp_size;
    if (num_kv_heads % tp == 0) {
      g.num_kv_heads = num_kv_heads / tp;
    } else if (tp % num_kv_heads == 0) {
      g.num_kv_heads = 1;
    } else {
      return invalid_argument(std::string(source) + ": --tp " + std::to_string(tp) +
                              " neither divides nor is a multiple of num_key_value_heads (" +
                              std::to_string(num_kv_heads) + ")");
    }
  } else {
    return reader.error("model_type", "'" + model_type +
                                          "' is not supported (expected qwen3, qwen2, llama, mistral, "
                                          "deepseek_v2 or deepseek_v3)");
  }

  HIQ_RETURN_IF_ERROR(g.validate().with_context(source));
  return g;
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
