#include "model/model_config.h"

#include <array>
#include <cmath>
#include <initializer_list>

#include <nlohmann/json.hpp>

#include "kv/config_reader.h"

namespace hiq {
namespace {

using nlohmann::json;

Result<ModelArchitecture> architecture_from(const ConfigReader& reader) {
  HIQ_ASSIGN_OR_RETURN(std::string model_type, reader.string("model_type"));
  if (model_type == "qwen3") return ModelArchitecture::kQwen3;
  if (model_type == "qwen2") return ModelArchitecture::kQwen2;
  if (model_type == "llama") return ModelArchitecture::kLlama;
  if (model_type == "mistral") return ModelArchitecture::kMistral;
  return reader.error("model_type", "'" + model_type + "' is not supported (expected qwen3, qwen2, llama or mistral)");
}

Result<TensorDtype> saved_dtype_from(const ConfigReader& reader) {
  // Newer transformers write "dtype", older ones "torch_dtype".
  for (std::string_view field : {"dtype", "torch_dtype"}) {
    if (!reader.has(field)) continue;
    HIQ_ASSIGN_OR_RETURN(std::string dtype, reader.string(field));
    if (dtype == "bfloat16") return TensorDtype::kBf16;
    if (dtype == "float16") return TensorDtype::kF16;
    if (dtype == "float32") return TensorDtype::kF32;
    return reader.error(field, "names an unsupported dtype '" + dtype + "' (expected bfloat16, float16 or float32)");
  }
  return TensorDtype::kBf16;
}

// Fields that would change the computation in ways this runtime does not
// implement. Silently ignoring any of them would serve wrong logits.
Status refuse_unsupported_features(const ConfigReader& reader, const json& config, ModelArchitecture arch) {
  HIQ_ASSIGN_OR_RETURN(std::string act, reader.optional_string("hidden_act", "silu"));
  if (act != "silu") return reader.error("hidden_act", "is '" + act + "'; only silu (SwiGLU) is implemented");
  HIQ_ASSIGN_OR_RETURN(bool mlp_bias, reader.optional_bool("mlp_bias", false));
  if (mlp_bias) return reader.error("mlp_bias", "is true; MLP biases are not implemented");
  if (reader.has("quantization_config"))
    return reader.error("quantization_config", "is present; quantized checkpoints are not supported");
  for (std::string_view moe : {"num_experts", "num_local_experts", "n_routed_experts", "num_experts_per_tok",
                               "moe_intermediate_size"}) {
    if (!reader.has(moe)) continue;
    const json& v = config.at(std::string(moe));
    if (v.is_number() && v.get<double>() == 0) continue;  // a dense model may write 0
    return reader.error(moe, "describes a mixture of experts, which is not supported");
  }
  if (reader.has("partial_rotary_factor")) {
    HIQ_ASSIGN_OR_RETURN(double partial, reader.number("partial_rotary_factor"));
    if (partial != 1.0) return reader.error("partial_rotary_factor", "must be 1 (partial RoPE is not supported)");
  }
  // Sliding windows: Qwen turns them on with use_sliding_window; Mistral with
  // a non-null sliding_window; transformers 5 lists a type per layer.
  HIQ_ASSIGN_OR_RETURN(bool use_sliding_window, reader.optional_bool("use_sliding_window", false));
  if (use_sliding_window) return reader.error("use_sliding_window", "is true; sliding-window attention is not supported");
  if (arch == ModelArchitecture::kMistral && reader.has("sliding_window"))
    return reader.error("sliding_window", "is set; sliding-window attention is not supported (null turns it off)");
  if (reader.has("layer_types")) {
    const json& types = config.at("layer_types");
    if (!types.is_array()) return reader.error("layer_types", "must be an array");
    for (const json& t : types)
      if (!t.is_string() || t.get_ref<const std::string&>() != "full_attention")
        return reader.error("layer_types", "has " + describe_json_value(t) +
                                               "; only full_attention layers are supported");
  }
  return Status::ok();
}

// The keys a RoPE dictionary may hold for a type, besides rope_type/type and
// rope_theta. Anything else is refused: it would be a parameter we ignore.
bool rope_key_allowed(RopeScaling::Kind kind, std::string_view key) {
  if (key == "rope_type" || key == "type" || key == "rope_theta" || key == "partial_rotary_factor") return true;
  switch (kind) {
    case RopeScaling::Kind::kNone: return false;
    case RopeScaling::Kind::kLlama3:
      return key == "factor" || key == "low_freq_factor" || key == "high_freq_factor" ||
             key == "original_max_position_embeddings";
    case RopeScaling::Kind::kYarn:
      return key == "factor" || key == "original_max_position_embeddings" || key == "beta_fast" ||
             key == "beta_slow" || key == "mscale" || key == "mscale_all_dim" || key == "truncate";
  }
  return false;
}

// Ranges the RoPE formulas need (llama3 divides by high − low; yarn takes
// logarithms of the factors). `prefix` is the config field that held them.
Status check_rope_scaling(const RopeScaling& s, const std::string& source, const std::string& prefix) {
  const auto error = [&](std::string_view field, std::string_view problem) {
    return invalid_argument(source + ": field '" + prefix + std::string(field) + "' " + std::string(problem));
  };
  const auto positive = [](double x) { return x > 0 && std::isfinite(x); };
  switch (s.kind) {
    case RopeScaling::Kind::kNone:
      break;
    case RopeScaling::Kind::kLlama3:
      if (!positive(s.factor)) return error("factor", "must be positive");
      if (!positive(s.low_freq_factor)) return error("low_freq_factor", "must be positive");
      if (!positive(s.high_freq_factor) || !(s.high_freq_factor > s.low_freq_factor))
        return error("high_freq_factor", "must be above low_freq_factor");
      if (s.original_max_position_embeddings <= 0) return error("original_max_position_embeddings", "must be positive");
      break;
    case RopeScaling::Kind::kYarn:
      if (!positive(s.factor)) return error("factor", "must be positive");
      if (s.original_max_position_embeddings < 0) return error("original_max_position_embeddings", "must be positive");
      if (!positive(s.beta_fast)) return error("beta_fast", "must be positive");
      if (!positive(s.beta_slow)) return error("beta_slow", "must be positive");
      if (!(s.mscale >= 0) || !std::isfinite(s.mscale)) return error("mscale", "must be zero or positive");
      if (!(s.mscale_all_dim >= 0) || !std::isfinite(s.mscale_all_dim))
        return error("mscale_all_dim", "must be zero or positive");
      break;
  }
  return Status::ok();
}

// Reads rope_theta and rope_scaling: transformers 4.x writes `rope_theta` and
// `rope_scaling` (null or a dict); 5.x writes a `rope_parameters` dict holding
// rope_theta too. Like transformers, rope_scaling wins when both are set.
Status read_rope(const ConfigReader& reader, const json& config, ModelConfig& out) {
  HIQ_ASSIGN_OR_RETURN(out.rope_theta, reader.optional_number("rope_theta", 10000.0));
  std::string field;
  if (reader.has("rope_scaling")) field = "rope_scaling";
  else if (reader.has("rope_parameters")) field = "rope_parameters";
  else return Status::ok();
  const json& rope = config.at(field);
  if (!rope.is_object()) return reader.error(field, "must be an object or null");
  const ConfigReader r(rope, reader.source(), field + ".");

  HIQ_ASSIGN_OR_RETURN(std::string type, r.optional_string("rope_type", ""));
  HIQ_ASSIGN_OR_RETURN(std::string legacy_type, r.optional_string("type", ""));
  if (!type.empty() && !legacy_type.empty() && type != legacy_type)
    return r.error("type", "('" + legacy_type + "') disagrees with rope_type ('" + type + "')");
  if (type.empty()) type = legacy_type.empty() ? "default" : legacy_type;
  RopeScaling& s = out.rope_scaling;
  if (type == "default") s.kind = RopeScaling::Kind::kNone;
  else if (type == "llama3") s.kind = RopeScaling::Kind::kLlama3;
  else if (type == "yarn") s.kind = RopeScaling::Kind::kYarn;
  else return r.error("rope_type", "'" + type + "' is not supported (expected default, llama3 or yarn)");

  for (const auto& [key, value] : rope.items())
    if (!value.is_null() && !rope_key_allowed(s.kind, key))
      return r.error(key, "is not supported with rope type '" + type + "'");
  if (r.has("rope_theta")) {
    HIQ_ASSIGN_OR_RETURN(out.rope_theta, r.number("rope_theta"));
  }
  if (r.has("partial_rotary_factor")) {
    HIQ_ASSIGN_OR_RETURN(double partial, r.number("partial_rotary_factor"));
    if (partial != 1.0) return r.error("partial_rotary_factor", "must be 1 (partial RoPE is not supported)");
  }

  switch (s.kind) {
    case RopeScaling::Kind::kNone:
      break;
    case RopeScaling::Kind::kLlama3: {
      // transformers requires all four.
      HIQ_ASSIGN_OR_RETURN(s.factor, r.number("factor"));
      HIQ_ASSIGN_OR_RETURN(s.low_freq_factor, r.number("low_freq_factor"));
      HIQ_ASSIGN_OR_RETURN(s.high_freq_factor, r.number("high_freq_factor"));
      HIQ_ASSIGN_OR_RETURN(s.original_max_position_embeddings, r.positive_int("original_max_position_embeddings"));
      break;
    }
    case RopeScaling::Kind::kYarn: {
      HIQ_ASSIGN_OR_RETURN(s.factor, r.number("factor"));
      HIQ_ASSIGN_OR_RETURN(s.original_max_position_embeddings,
                           r.optional_positive_int("original_max_position_embeddings", 0));
      HIQ_ASSIGN_OR_RETURN(s.beta_fast, r.optional_number("beta_fast", 32.0));
      HIQ_ASSIGN_OR_RETURN(s.beta_slow, r.optional_number("beta_slow", 1.0));
      HIQ_ASSIGN_OR_RETURN(s.mscale, r.optional_number("mscale", 1.0));
      HIQ_ASSIGN_OR_RETURN(s.mscale_all_dim, r.optional_number("mscale_all_dim", 0.0));
      // truncate=false (keep fractional correction bounds) is not what rope.h computes.
      HIQ_ASSIGN_OR_RETURN(bool truncate, r.optional_bool("truncate", true));
      if (!truncate) return r.error("truncate", "is false; only truncated yarn correction bounds are supported");
      break;
    }
  }
  return check_rope_scaling(s, reader.source(), field + ".");
}

// transformers' default max_position_embeddings per architecture, for configs
// that omit it (real ones do not).
int default_max_positions(ModelArchitecture arch) {
  switch (arch) {
    case ModelArchitecture::kQwen3: return 32768;
    case ModelArchitecture::kQwen2: return 32768;
    case ModelArchitecture::kLlama: return 2048;
    case ModelArchitecture::kMistral: return 4096 * 32;
  }
  return 2048;
}

}  // namespace

std::string_view model_architecture_name(ModelArchitecture architecture) {
  switch (architecture) {
    case ModelArchitecture::kQwen3: return "qwen3";
    case ModelArchitecture::kQwen2: return "qwen2";
    case ModelArchitecture::kLlama: return "llama";
    case ModelArchitecture::kMistral: return "mistral";
  }
  return "?";
}

Result<ModelConfig> model_config_from_json(std::string_view json_text, std::string_view source) {
  // Duplicate keys are left to nlohmann, which keeps the last one, as Python's
  // json module (and so transformers) does.
  json config = json::parse(json_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return invalid_argument(std::string(source) + ": not valid JSON");
  if (!config.is_object()) return invalid_argument(std::string(source) + ": expected a JSON object");
  const ConfigReader reader(config, source);

  ModelConfig c;
  c.source = std::string(source);
  HIQ_ASSIGN_OR_RETURN(c.architecture, architecture_from(reader));
  HIQ_RETURN_IF_ERROR(refuse_unsupported_features(reader, config, c.architecture));
  HIQ_ASSIGN_OR_RETURN(c.vocab_size, reader.positive_int("vocab_size"));
  HIQ_ASSIGN_OR_RETURN(c.hidden_size, reader.positive_int("hidden_size"));
  HIQ_ASSIGN_OR_RETURN(c.intermediate_size, reader.positive_int("intermediate_size"));
  HIQ_ASSIGN_OR_RETURN(c.num_layers, reader.positive_int("num_hidden_layers"));
  HIQ_ASSIGN_OR_RETURN(c.num_attention_heads, reader.positive_int("num_attention_heads"));
  HIQ_ASSIGN_OR_RETURN(c.num_kv_heads, reader.optional_positive_int("num_key_value_heads", c.num_attention_heads));
  if (reader.has("head_dim")) {
    HIQ_ASSIGN_OR_RETURN(c.head_dim, reader.positive_int("head_dim"));
  } else if (c.architecture == ModelArchitecture::kQwen3) {
    // transformers' Qwen3Config defaults head_dim to 128, not hidden/heads (and
    // kv/model_config.cc derives hidden/heads): refuse to guess.
    return reader.error("head_dim", "is missing (qwen3 configs must give it)");
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      return reader.error("hidden_size", "(" + std::to_string(c.hidden_size) +
                                             ") is not a multiple of num_attention_heads (" +
                                             std::to_string(c.num_attention_heads) + ") and 'head_dim' is absent");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  HIQ_ASSIGN_OR_RETURN(c.rms_norm_eps, reader.optional_number("rms_norm_eps", 1e-6));
  HIQ_RETURN_IF_ERROR(read_rope(reader, config, c));
  HIQ_ASSIGN_OR_RETURN(c.max_position_embeddings,
                       reader.optional_positive_int("max_position_embeddings", default_max_positions(c.architecture)));
  HIQ_ASSIGN_OR_RETURN(c.tie_word_embeddings, reader.optional_bool("tie_word_embeddings", false));
  HIQ_ASSIGN_OR_RETURN(c.torch_dtype, saved_dtype_from(reader));

  HIQ_ASSIGN_OR_RETURN(bool attention_bias, reader.optional_bool("attention_bias", false));
  switch (c.architecture) {
    case ModelArchitecture::kQwen3:
      c.qk_norm = true;
      c.qkv_bias = c.o_bias = attention_bias;
      break;
    case ModelArchitecture::kQwen2:
      c.qkv_bias = true;  // hard-wired in transformers' Qwen2Attention, whatever attention_bias says
      break;
    case ModelArchitecture::kLlama:
      c.qkv_bias = c.o_bias = attention_bias;
      break;
    case ModelArchitecture::kMistral:
      break;  // transformers' MistralAttention has no biases and ignores attention_bias
  }

  HIQ_RETURN_IF_ERROR(c.validate());
  return c;
}

Result<ModelConfig> model_config_from_file(const std::string& path) {
  HIQ_ASSIGN_OR_RETURN(ConfigFile file, read_config_file(path));
  return model_config_from_json(file.text, file.path);
}

Status ModelConfig::validate() const {
  const auto error = [&](std::string_view field, const std::string& problem) {
    return invalid_argument(source + ": field '" + std::string(field) + "' " + problem);
  };
  const auto positive = [&](int v, std::string_view field) -> Status {
    if (v > 0) return Status::ok();
    return error(field, "must be positive (got " + std::to_string(v) + ")");
  };
  HIQ_RETURN_IF_ERROR(positive(vocab_size, "vocab_size"));
  HIQ_RETURN_IF_ERROR(positive(hidden_size, "hidden_size"));
  HIQ_RETURN_IF_ERROR(positive(intermediate_size, "intermediate_size"));
  HIQ_RETURN_IF_ERROR(positive(num_layers, "num_hidden_layers"));
  HIQ_RETURN_IF_ERROR(positive(num_attention_heads, "num_attention_heads"));
  HIQ_RETURN_IF_ERROR(positive(num_kv_heads, "num_key_value_heads"));
  HIQ_RETURN_IF_ERROR(positive(head_dim, "head_dim"));
  HIQ_RETURN_IF_ERROR(positive(max_position_embeddings, "max_position_embeddings"));
  if (num_attention_heads % num_kv_heads != 0)
    return error("num_key_value_heads", "(" + std::to_string(num_kv_heads) + ") must divide num_attention_heads (" +
                                            std::to_string(num_attention_heads) + ")");
  if (head_dim % 2 != 0) return error("head_dim", "must be even: RoPE rotates pairs (got " + std::to_string(head_dim) + ")");
  // q_proj has heads × head_dim rows; keep every matrix dimension within int.
  if (int64_t{num_attention_heads} * head_dim > (1 << 24))
    return error("head_dim", "× num_attention_heads exceeds 2^24");
  if (!(rms_norm_eps > 0) || !std::isfinite(rms_norm_eps))
    return error("rms_norm_eps", "must be a positive number");
  if (!(rope_theta > 0) || !std::isfinite(rope_theta)) return error("rope_theta", "must be positive");
  if (qk_norm != (architecture == ModelArchitecture::kQwen3))
    return error("model_type", "qk_norm must be set for qwen3 and only for it");

  return check_rope_scaling(rope_scaling, source, "rope_scaling.");
}

KvGeometry ModelConfig::kv_geometry(int page_size) const {
  HIQ_CHECK_MSG(validate().is_ok(), "kv_geometry() of an invalid ModelConfig");
  HIQ_CHECK_MSG(page_size > 0 && page_size <= kMaxPageSize, "kv_geometry(): page_size out of range");
  KvGeometry g;
  g.name = source;
  g.num_layers = num_layers;
  g.num_kv_heads = num_kv_heads;
  g.total_kv_heads = num_kv_heads;
  g.k_head_dim = head_dim;
  g.v_head_dim = head_dim;
  g.page_size = page_size;
  g.l1_dtype = L1Dtype::kBf16;
  g.attention = AttentionKind::kMha;
  g.tp_size = 1;
  return g;
}

}  // namespace hiq
