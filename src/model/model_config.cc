#include "model/model_config.h"

#include <array>
#include <cmath>
#include <initializer_list>

#include "kv/config_reader.h"
#include "kv/model_config.h"

namespace hiq {
namespace {

Status field_error(const HfConfig& hf, std::string_view field, std::string_view problem) {
  return config_field_error(hf.source, field, problem);
}

Result<ModelArchitecture> architecture_from(const HfConfig& hf) {
  switch (hf.family) {
    case ModelFamily::kQwen3: return ModelArchitecture::kQwen3;
    case ModelFamily::kQwen2: return ModelArchitecture::kQwen2;
    case ModelFamily::kLlama: return ModelArchitecture::kLlama;
    case ModelFamily::kMistral: return ModelArchitecture::kMistral;
    case ModelFamily::kDeepseekV2:
    case ModelFamily::kDeepseekV3: break;
  }
  return field_error(hf, "model_type", "'" + std::string(model_family_name(hf.family)) +
                                           "' is not supported by the model runtime (expected qwen3, qwen2, "
                                           "llama or mistral)");
}

TensorDtype tensor_dtype(CheckpointDtype dtype) {
  switch (dtype) {
    case CheckpointDtype::kBf16: return TensorDtype::kBf16;
    case CheckpointDtype::kF16: return TensorDtype::kF16;
    case CheckpointDtype::kF32: return TensorDtype::kF32;
  }
  return TensorDtype::kBf16;
}

// Fields that would change the computation in ways this runtime does not
// implement. Silently ignoring any of them would serve wrong logits.
Status refuse_unsupported_features(const HfConfig& hf, ModelArchitecture arch) {
  if (hf.hidden_act != "silu")
    return field_error(hf, "hidden_act", "is '" + hf.hidden_act + "'; only silu (SwiGLU) is implemented");
  if (hf.mlp_bias) return field_error(hf, "mlp_bias", "is true; MLP biases are not implemented");
  if (hf.quantized)
    return field_error(hf, "quantization_config", "is present; quantized checkpoints are not supported");
  if (!hf.moe_field.empty())
    return field_error(hf, hf.moe_field, "describes a mixture of experts, which is not supported");
  if (hf.partial_rotary_factor && *hf.partial_rotary_factor != 1.0)
    return field_error(hf, "partial_rotary_factor", "must be 1 (partial RoPE is not supported)");
  if (hf.use_sliding_window)
    return field_error(hf, "use_sliding_window", "is true; sliding-window attention is not supported");
  if (arch == ModelArchitecture::kMistral && hf.sliding_window_set)
    return field_error(hf, "sliding_window", "is set; sliding-window attention is not supported (null turns it off)");
  if (!hf.non_full_attention_layer.empty())
    return field_error(hf, "layer_types", "has " + hf.non_full_attention_layer +
                                              "; only full_attention layers are supported");
  return Status::ok();
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
      if (!positive(s.factor) || !(s.factor >= 1)) return error("factor", "must be at least 1");
      if (!positive(s.low_freq_factor)) return error("low_freq_factor", "must be positive");
      if (!positive(s.high_freq_factor) || !(s.high_freq_factor > s.low_freq_factor))
        return error("high_freq_factor", "must be above low_freq_factor");
      if (s.original_max_position_embeddings <= 0) return error("original_max_position_embeddings", "must be positive");
      break;
    case RopeScaling::Kind::kYarn:
      if (!positive(s.factor) || !(s.factor >= 1)) return error("factor", "must be at least 1");
      if (s.original_max_position_embeddings < 0) return error("original_max_position_embeddings", "must be positive");
      if (!positive(s.beta_fast)) return error("beta_fast", "must be positive");
      if (!positive(s.beta_slow)) return error("beta_slow", "must be positive");
      if (!(s.beta_fast > s.beta_slow)) return error("beta_fast", "must be above beta_slow");
      if (!(s.mscale >= 0) || !std::isfinite(s.mscale)) return error("mscale", "must be zero or positive");
      if (!(s.mscale_all_dim >= 0) || !std::isfinite(s.mscale_all_dim))
        return error("mscale_all_dim", "must be zero or positive");
      break;
  }
  return Status::ok();
}

// The RoPE the config asks for, as a RopeScaling: the types rope.h computes
// (default, llama3, yarn) with every parameter they need; a type or a key we
// would ignore is refused.
Status rope_from(const HfConfig& hf, ModelConfig& out) {
  const HfRopeConfig& rope = hf.rope;
  out.rope_theta = hf.rope_theta;
  if (rope.field.empty()) return Status::ok();
  const std::string prefix = rope.field + ".";
  const auto error = [&](std::string_view key, std::string_view problem) {
    return field_error(hf, prefix + std::string(key), problem);
  };
  const auto required = [&](const std::optional<double>& v, std::string_view key) -> Result<double> {
    if (!v) return error(key, "is missing");
    return *v;
  };
  RopeScaling& s = out.rope_scaling;
  if (rope.type == "default") s.kind = RopeScaling::Kind::kNone;
  else if (rope.type == "llama3") s.kind = RopeScaling::Kind::kLlama3;
  else if (rope.type == "yarn") s.kind = RopeScaling::Kind::kYarn;
  else return error("rope_type", "'" + rope.type + "' is not supported (expected default, llama3 or yarn)");
  if (!rope.unknown_key.empty())
    return error(rope.unknown_key, "is not supported with rope type '" + rope.type + "'");
  if (rope.partial_rotary_factor && *rope.partial_rotary_factor != 1.0)
    return error("partial_rotary_factor", "must be 1 (partial RoPE is not supported)");

  switch (s.kind) {
    case RopeScaling::Kind::kNone:
      break;
    case RopeScaling::Kind::kLlama3: {
      // transformers requires all four.
      HIQ_ASSIGN_OR_RETURN(s.factor, required(rope.factor, "factor"));
      HIQ_ASSIGN_OR_RETURN(s.low_freq_factor, required(rope.low_freq_factor, "low_freq_factor"));
      HIQ_ASSIGN_OR_RETURN(s.high_freq_factor, required(rope.high_freq_factor, "high_freq_factor"));
      if (!rope.original_max_position_embeddings) return error("original_max_position_embeddings", "is missing");
      s.original_max_position_embeddings = *rope.original_max_position_embeddings;
      break;
    }
    case RopeScaling::Kind::kYarn: {
      HIQ_ASSIGN_OR_RETURN(s.factor, required(rope.factor, "factor"));
      s.original_max_position_embeddings = rope.original_max_position_embeddings.value_or(0);
      s.beta_fast = rope.beta_fast.value_or(32.0);
      s.beta_slow = rope.beta_slow.value_or(1.0);
      s.mscale = rope.mscale.value_or(0.0);
      s.mscale_all_dim = rope.mscale_all_dim.value_or(0.0);
      // truncate=false (keep fractional correction bounds) is not what rope.h computes.
      if (!rope.truncate) return error("truncate", "is false; only truncated yarn correction bounds are supported");
      break;
    }
  }
  return check_rope_scaling(s, hf.source, prefix);
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

Result<ModelConfig> model_config_from_hf_config(const HfConfig& hf) {
  ModelConfig c;
  c.source = hf.source;
  HIQ_ASSIGN_OR_RETURN(c.architecture, architecture_from(hf));
  HIQ_RETURN_IF_ERROR(refuse_unsupported_features(hf, c.architecture));
  // The parser leaves at 0 what a KV geometry does not need; a forward pass does.
  const auto required = [&](int value, std::string_view field) -> Result<int> {
    if (value == 0) return field_error(hf, field, "is missing");
    return value;
  };
  HIQ_ASSIGN_OR_RETURN(c.vocab_size, required(hf.vocab_size, "vocab_size"));
  HIQ_ASSIGN_OR_RETURN(c.hidden_size, required(hf.hidden_size, "hidden_size"));
  HIQ_ASSIGN_OR_RETURN(c.intermediate_size, required(hf.intermediate_size, "intermediate_size"));
  c.num_layers = hf.num_layers;
  c.num_attention_heads = hf.num_attention_heads;
  c.num_kv_heads = hf.num_kv_heads;
  c.head_dim = hf.head_dim;
  c.rms_norm_eps = hf.rms_norm_eps;
  HIQ_RETURN_IF_ERROR(rope_from(hf, c));
  c.max_position_embeddings =
      hf.max_position_embeddings > 0 ? hf.max_position_embeddings : default_max_positions(c.architecture);
  c.tie_word_embeddings = hf.tie_word_embeddings;
  c.torch_dtype = tensor_dtype(hf.dtype);

  switch (c.architecture) {
    case ModelArchitecture::kQwen3:
      c.qk_norm = true;
      c.qkv_bias = c.o_bias = hf.attention_bias;
      break;
    case ModelArchitecture::kQwen2:
      c.qkv_bias = true;  // hard-wired in transformers' Qwen2Attention, whatever attention_bias says
      break;
    case ModelArchitecture::kLlama:
      c.qkv_bias = c.o_bias = hf.attention_bias;
      break;
    case ModelArchitecture::kMistral:
      break;  // transformers' MistralAttention has no biases and ignores attention_bias
  }

  HIQ_RETURN_IF_ERROR(c.validate());
  return c;
}

Result<ModelConfig> model_config_from_json(std::string_view json_text, std::string_view source) {
  HIQ_ASSIGN_OR_RETURN(HfConfig hf, parse_hf_config(json_text, source));
  return model_config_from_hf_config(hf);
}

Result<ModelConfig> model_config_from_file(const std::string& path) {
  HIQ_ASSIGN_OR_RETURN(HfConfig hf, read_hf_config(path));
  return model_config_from_hf_config(hf);
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
  if (!(rope_theta > 1) || !std::isfinite(rope_theta)) return error("rope_theta", "must be a number above 1");
  // The context a yarn factor gives (context_length()) must be a count of positions.
  if (rope_scaling.kind == RopeScaling::Kind::kYarn) {
    const double original = rope_scaling.original_max_position_embeddings > 0
                                ? static_cast<double>(rope_scaling.original_max_position_embeddings)
                                : static_cast<double>(max_position_embeddings);
    if (!(original * rope_scaling.factor < 2147483648.0))
      return error("rope_scaling", "yarn's factor × original_max_position_embeddings exceeds 2^31 positions");
  }
  if (qk_norm != (architecture == ModelArchitecture::kQwen3))
    return error("model_type", "qk_norm must be set for qwen3 and only for it");

  return check_rope_scaling(rope_scaling, source, "rope_scaling.");
}

int64_t ModelConfig::context_length() const {
  if (rope_scaling.kind != RopeScaling::Kind::kYarn) return max_position_embeddings;
  const int64_t original = rope_scaling.original_max_position_embeddings > 0
                               ? rope_scaling.original_max_position_embeddings
                               : max_position_embeddings;
  return static_cast<int64_t>(static_cast<double>(original) * rope_scaling.factor);
}

KvGeometry ModelConfig::kv_geometry(int page_size) const {
  HIQ_CHECK_MSG(validate().is_ok(), "kv_geometry() of an invalid ModelConfig");
  GeometryOptions options;  // one TP rank, the default (BF16) L1: what the forward pass writes
  options.page_size = page_size;
  auto geometry = mha_kv_geometry(source, num_layers, num_kv_heads, head_dim, options);
  HIQ_CHECK_MSG(geometry.is_ok(), "kv_geometry(): page_size out of range");
  return *std::move(geometry);
}

}  // namespace hiq
