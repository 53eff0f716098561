#include "kv/hf_config.h"

#include <initializer_list>

#include <nlohmann/json.hpp>

#include "core/json_input.h"
#include "kv/config_reader.h"

namespace hiq {
namespace {

using nlohmann::json;

Result<ModelFamily> family_from(const ConfigReader& reader) {
  HIQ_ASSIGN_OR_RETURN(std::string model_type, reader.string("model_type"));
  for (ModelFamily f : {ModelFamily::kQwen3, ModelFamily::kQwen2, ModelFamily::kLlama, ModelFamily::kMistral,
                        ModelFamily::kDeepseekV2, ModelFamily::kDeepseekV3})
    if (model_type == model_family_name(f)) return f;
  return reader.error("model_type", "'" + model_type +
                                        "' is not supported (expected qwen3, qwen2, llama, mistral, "
                                        "deepseek_v2 or deepseek_v3)");
}

Result<CheckpointDtype> dtype_from(const ConfigReader& reader) {
  // Newer transformers write "dtype", older ones "torch_dtype".
  for (std::string_view field : {"dtype", "torch_dtype"}) {
    if (!reader.has(field)) continue;
    HIQ_ASSIGN_OR_RETURN(std::string dtype, reader.string(field));
    for (CheckpointDtype d : {CheckpointDtype::kBf16, CheckpointDtype::kF16, CheckpointDtype::kF32})
      if (dtype == checkpoint_dtype_name(d)) return d;
    return reader.error(field, "names an unsupported dtype '" + dtype + "' (expected bfloat16, float16 or float32)");
  }
  return CheckpointDtype::kBf16;
}

// The keys a RoPE dictionary may hold for a type, besides rope_type/type,
// rope_theta and partial_rotary_factor.
bool rope_key_defined(std::string_view type, std::string_view key) {
  if (key == "rope_type" || key == "type" || key == "rope_theta" || key == "partial_rotary_factor") return true;
  if (type == "llama3")
    return key == "factor" || key == "low_freq_factor" || key == "high_freq_factor" ||
           key == "original_max_position_embeddings";
  if (type == "yarn")
    return key == "factor" || key == "original_max_position_embeddings" || key == "beta_fast" ||
           key == "beta_slow" || key == "mscale" || key == "mscale_all_dim" || key == "truncate";
  return type != "default";  // an unknown type: its consumer refuses the type itself
}

Result<std::optional<double>> optional_number(const ConfigReader& r, std::string_view field) {
  if (!r.has(field)) return std::optional<double>{};
  HIQ_ASSIGN_OR_RETURN(double x, r.number(field));
  return std::optional<double>(x);
}

Status read_rope(const ConfigReader& reader, const json& config, HfConfig& out) {
  HIQ_ASSIGN_OR_RETURN(out.rope_theta, reader.optional_number("rope_theta", 10000.0));
  HfRopeConfig& rope = out.rope;
  if (reader.has("rope_scaling")) rope.field = "rope_scaling";
  else if (reader.has("rope_parameters")) rope.field = "rope_parameters";
  else return Status::ok();
  const json& dict = config.at(rope.field);
  if (!dict.is_object()) return reader.error(rope.field, "must be an object or null");
  const ConfigReader r(dict, reader.source(), rope.field + ".");

  HIQ_ASSIGN_OR_RETURN(std::string type, r.optional_string("rope_type", ""));
  HIQ_ASSIGN_OR_RETURN(std::string legacy_type, r.optional_string("type", ""));
  if (!type.empty() && !legacy_type.empty() && type != legacy_type)
    return r.error("type", "('" + legacy_type + "') disagrees with rope_type ('" + type + "')");
  rope.type = !type.empty() ? type : !legacy_type.empty() ? legacy_type : "default";

  for (const auto& [key, value] : dict.items()) {
    if (!value.is_null() && !rope_key_defined(rope.type, key)) {
      rope.unknown_key = key;
      break;
    }
  }
  if (r.has("rope_theta")) {
    HIQ_ASSIGN_OR_RETURN(out.rope_theta, r.number("rope_theta"));
  }
  HIQ_ASSIGN_OR_RETURN(rope.partial_rotary_factor, optional_number(r, "partial_rotary_factor"));
  if (rope.type != "llama3" && rope.type != "yarn") return Status::ok();

  HIQ_ASSIGN_OR_RETURN(rope.factor, optional_number(r, "factor"));
  if (r.has("original_max_position_embeddings")) {
    HIQ_ASSIGN_OR_RETURN(rope.original_max_position_embeddings, r.positive_int("original_max_position_embeddings"));
  }
  if (rope.type == "llama3") {
    HIQ_ASSIGN_OR_RETURN(rope.low_freq_factor, optional_number(r, "low_freq_factor"));
    HIQ_ASSIGN_OR_RETURN(rope.high_freq_factor, optional_number(r, "high_freq_factor"));
  } else {
    HIQ_ASSIGN_OR_RETURN(rope.beta_fast, optional_number(r, "beta_fast"));
    HIQ_ASSIGN_OR_RETURN(rope.beta_slow, optional_number(r, "beta_slow"));
    HIQ_ASSIGN_OR_RETURN(rope.mscale, optional_number(r, "mscale"));
    HIQ_ASSIGN_OR_RETURN(rope.mscale_all_dim, optional_number(r, "mscale_all_dim"));
    HIQ_ASSIGN_OR_RETURN(rope.truncate, r.optional_bool("truncate", true));
  }
  return Status::ok();
}

Status read_features(const ConfigReader& reader, const json& config, HfConfig& out) {
  HIQ_ASSIGN_OR_RETURN(out.hidden_act, reader.optional_string("hidden_act", "silu"));
  HIQ_ASSIGN_OR_RETURN(out.mlp_bias, reader.optional_bool("mlp_bias", false));
  out.quantized = reader.has("quantization_config");
  for (std::string_view moe : {"num_experts", "num_local_experts", "n_routed_experts", "num_experts_per_tok",
                               "moe_intermediate_size"}) {
    if (!reader.has(moe)) continue;
    const json& v = config.at(std::string(moe));
    if (v.is_number() && v.get<double>() == 0) continue;  // a dense model may write 0
    out.moe_field = std::string(moe);
    break;
  }
  if (reader.has("partial_rotary_factor")) {
    HIQ_ASSIGN_OR_RETURN(out.partial_rotary_factor, reader.number("partial_rotary_factor"));
  }
  // Sliding windows: Qwen turns them on with use_sliding_window; Mistral with
  // a non-null sliding_window; transformers 5 lists a type per layer.
  HIQ_ASSIGN_OR_RETURN(out.use_sliding_window, reader.optional_bool("use_sliding_window", false));
  out.sliding_window_set = reader.has("sliding_window");
  if (reader.has("layer_types")) {
    const json& types = config.at("layer_types");
    if (!types.is_array()) return reader.error("layer_types", "must be an array");
    for (const json& t : types) {
      if (!t.is_string() || t.get_ref<const std::string&>() != "full_attention") {
        out.non_full_attention_layer = describe_json_value(t);
        break;
      }
    }
  }
  return Status::ok();
}

Status read_attention_shape(const ConfigReader& reader, HfConfig& c) {
  HIQ_ASSIGN_OR_RETURN(c.num_layers, reader.positive_int("num_hidden_layers"));
  if (is_mla_family(c.family)) {
    HIQ_ASSIGN_OR_RETURN(c.kv_lora_rank, reader.positive_int("kv_lora_rank"));
    HIQ_ASSIGN_OR_RETURN(c.qk_rope_head_dim, reader.positive_int("qk_rope_head_dim"));
    HIQ_ASSIGN_OR_RETURN(c.hidden_size, reader.optional_positive_int("hidden_size", 0));
    HIQ_ASSIGN_OR_RETURN(c.num_attention_heads, reader.optional_positive_int("num_attention_heads", 0));
    HIQ_ASSIGN_OR_RETURN(c.num_kv_heads, reader.optional_positive_int("num_key_value_heads", c.num_attention_heads));
    return Status::ok();
  }
  HIQ_ASSIGN_OR_RETURN(c.num_attention_heads, reader.positive_int("num_attention_heads"));
  HIQ_ASSIGN_OR_RETURN(c.num_kv_heads, reader.optional_positive_int("num_key_value_heads", c.num_attention_heads));
  if (c.num_attention_heads % c.num_kv_heads != 0)
    return reader.error("num_key_value_heads", "(" + std::to_string(c.num_kv_heads) +
                                                   ") must divide num_attention_heads (" +
                                                   std::to_string(c.num_attention_heads) + ")");
  const bool has_head_dim = reader.has("head_dim");
  if (has_head_dim) {
    HIQ_ASSIGN_OR_RETURN(c.head_dim, reader.positive_int("head_dim"));
  }
  if (has_head_dim || c.family == ModelFamily::kQwen3) {
    HIQ_ASSIGN_OR_RETURN(c.hidden_size, reader.optional_positive_int("hidden_size", 0));
    // transformers' Qwen3Config defaults head_dim to 128, not hidden/heads.
    if (!has_head_dim) c.head_dim = 128;
    return Status::ok();
  }
  HIQ_ASSIGN_OR_RETURN(c.hidden_size, reader.positive_int("hidden_size"));
  if (c.hidden_size % c.num_attention_heads != 0)
    return reader.error("hidden_size", "(" + std::to_string(c.hidden_size) +
                                           ") is not a multiple of num_attention_heads (" +
                                           std::to_string(c.num_attention_heads) + ") and 'head_dim' is absent");
  c.head_dim = c.hidden_size / c.num_attention_heads;
  return Status::ok();
}

}  // namespace

std::string_view model_family_name(ModelFamily family) {
  switch (family) {
    case ModelFamily::kQwen3: return "qwen3";
    case ModelFamily::kQwen2: return "qwen2";
    case ModelFamily::kLlama: return "llama";
    case ModelFamily::kMistral: return "mistral";
    case ModelFamily::kDeepseekV2: return "deepseek_v2";
    case ModelFamily::kDeepseekV3: return "deepseek_v3";
  }
  return "?";
}

bool is_mla_family(ModelFamily family) {
  return family == ModelFamily::kDeepseekV2 || family == ModelFamily::kDeepseekV3;
}

std::string_view checkpoint_dtype_name(CheckpointDtype dtype) {
  switch (dtype) {
    case CheckpointDtype::kBf16: return "bfloat16";
    case CheckpointDtype::kF16: return "float16";
    case CheckpointDtype::kF32: return "float32";
  }
  return "?";
}

Result<HfConfig> parse_hf_config(std::string_view json_text, std::string_view source) {
  // The one policy for model files (core/json_input.h): bounded nesting, and a
  // key given twice is refused (which value was meant?) — as every other
  // reader of the directory's files, so `hiq generate` and `hiq serve` take
  // or refuse the same config.json.
  Result<json> parsed = parse_strict_json(json_text, source, /*max_nesting=*/64);
  if (!parsed.is_ok()) return invalid_argument(parsed.status().message());
  json config = std::move(*parsed);
  if (!config.is_object()) return invalid_argument(std::string(source) + ": expected a JSON object");
  const ConfigReader reader(config, source);

  HfConfig c;
  c.source = std::string(source);
  HIQ_ASSIGN_OR_RETURN(c.family, family_from(reader));
  HIQ_RETURN_IF_ERROR(read_attention_shape(reader, c));
  HIQ_ASSIGN_OR_RETURN(c.dtype, dtype_from(reader));
  HIQ_RETURN_IF_ERROR(read_features(reader, config, c));
  HIQ_ASSIGN_OR_RETURN(c.vocab_size, reader.optional_positive_int("vocab_size", 0));
  HIQ_ASSIGN_OR_RETURN(c.intermediate_size, reader.optional_positive_int("intermediate_size", 0));
  HIQ_ASSIGN_OR_RETURN(c.max_position_embeddings, reader.optional_positive_int("max_position_embeddings", 0));
  HIQ_ASSIGN_OR_RETURN(c.rms_norm_eps, reader.optional_number("rms_norm_eps", 1e-6));
  HIQ_ASSIGN_OR_RETURN(c.tie_word_embeddings, reader.optional_bool("tie_word_embeddings", false));
  HIQ_ASSIGN_OR_RETURN(c.attention_bias, reader.optional_bool("attention_bias", false));
  HIQ_RETURN_IF_ERROR(read_rope(reader, config, c));
  return c;
}

Result<HfConfig> read_hf_config(const std::string& path) {
  HIQ_ASSIGN_OR_RETURN(ConfigFile file, read_config_file(path));
  return parse_hf_config(file.text, file.path);
}

}  // namespace hiq
