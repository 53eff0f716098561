#include "model/weights.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <set>
#include <string_view>

#include "codec/numeric.h"
#include "core/json_input.h"
#include "core/log.h"

namespace hiq {
namespace {

std::string layer_prefix(int layer) { return "model.layers." + std::to_string(layer) + "."; }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// "a, b, c" — or the first eight and how many more: one message stays readable
// when a whole family of tensors is wrong (e.g. every layer's q_norm).
std::string list_of(const std::vector<std::string>& items) {
  constexpr size_t kShown = 8;
  std::string out;
  for (size_t i = 0; i < items.size() && i < kShown; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > kShown) out += " and " + std::to_string(items.size() - kShown) + " more";
  return out;
}

// Buffers transformers keeps in some old checkpoints and recomputes on load.
bool is_ignored_buffer(std::string_view name) { return name.ends_with("rotary_emb.inv_freq"); }

// Every dtype we load is accepted for every tensor: the forward pass converts
// on read. A new dtype must be decided here (and read in element_value).
bool dtype_is_loadable(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::kBf16:
    case TensorDtype::kF16:
    case TensorDtype::kF32:
      return true;
  }
  return false;
}

float element_value(const TensorView& t, size_t i) {
  const std::byte* p = t.data + i * tensor_dtype_bytes(t.dtype);
  uint16_t half = 0;
  float value = 0.f;
  switch (t.dtype) {
    case TensorDtype::kBf16: std::memcpy(&half, p, 2); return numeric::bf16_to_float(half);
    case TensorDtype::kF16: std::memcpy(&half, p, 2); return numeric::f16_to_float(half);
    case TensorDtype::kF32: std::memcpy(&value, p, 4); return value;
  }
  return value;
}

// Whether `count` elements of a and b from `first` on hold the same values:
// the same bytes when stored alike, else the same numbers to within the
// roundings of a conversion (an F32 copy of BF16 embeddings is the same LM
// head; so are BF16 and F16 copies each rounded from one F32 original, at
// most 2^-9 + 2^-12 apart relatively): 2^-7 of the larger magnitude, plus
// 2^-24 for F16's subnormals. Infinities must match exactly.
bool same_values(const TensorView& a, const TensorView& b, size_t first, size_t count) {
  if (a.dtype == b.dtype) {
    const size_t bytes = tensor_dtype_bytes(a.dtype);
    return std::memcmp(a.data + first * bytes, b.data + first * bytes, count * bytes) == 0;
  }
  for (size_t i = first; i < first + count; ++i) {
    const float x = element_value(a, i), y = element_value(b, i);
    if (x == y || (std::isnan(x) && std::isnan(y))) continue;
    if (!std::isfinite(x) || !std::isfinite(y)) return false;
    if (!(std::fabs(x - y) <= 0x1p-7f * std::max(std::fabs(x), std::fabs(y)) + 0x1p-24f)) return false;
  }
  return true;
}

}  // namespace

std::vector<TensorSpec> expected_tensors(const ModelConfig& c) {
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size, vocab = c.vocab_size;
  const int64_t q = c.q_width(), kv = c.kv_width(), head = c.head_dim;
  std::vector<TensorSpec> specs;
  specs.push_back({"model.embed_tokens.weight", {vocab, hidden}});
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const std::string p = layer_prefix(layer);
    specs.push_back({p + "input_layernorm.weight", {hidden}});
    specs.push_back({p + "self_attn.q_proj.weight", {q, hidden}});
    specs.push_back({p + "self_attn.k_proj.weight", {kv, hidden}});
    specs.push_back({p + "self_attn.v_proj.weight", {kv, hidden}});
    if (c.qkv_bias) {
      specs.push_back({p + "self_attn.q_proj.bias", {q}});
      specs.push_back({p + "self_attn.k_proj.bias", {kv}});
      specs.push_back({p + "self_attn.v_proj.bias", {kv}});
    }
    if (c.qk_norm) {
      specs.push_back({p + "self_attn.q_norm.weight", {head}});
      specs.push_back({p + "self_attn.k_norm.weight", {head}});
    }
    specs.push_back({p + "self_attn.o_proj.weight", {hidden, q}});
    if (c.o_bias) specs.push_back({p + "self_attn.o_proj.bias", {hidden}});
    specs.push_back({p + "post_attention_layernorm.weight", {hidden}});
    specs.push_back({p + "mlp.gate_proj.weight", {inter, hidden}});
    specs.push_back({p + "mlp.up_proj.weight", {inter, hidden}});
    specs.push_back({p + "mlp.down_proj.weight", {hidden, inter}});
  }
  specs.push_back({"model.norm.weight", {hidden}});
  if (!c.tie_word_embeddings) specs.push_back({"lm_head.weight", {vocab, hidden}});
  return specs;
}

namespace {

// One past the highest layer index among the checkpoint's "model.layers.<n>."
// tensor names (0: none).
int64_t stored_layers(const Checkpoint& checkpoint) {
  constexpr std::string_view kPrefix = "model.layers.";
  int64_t layers = 0;
  for (const std::string& name : checkpoint.names()) {
    if (!name.starts_with(kPrefix)) continue;
    int64_t index = 0;
    const char* first = name.data() + kPrefix.size();
    const auto [end, error] = std::from_chars(first, name.data() + name.size(), index);
    if (error == std::errc() && end != first && *end == '.') layers = std::max(layers, index + 1);
  }
  return layers;
}

}  // namespace

Result<ModelWeights> bind_weights(const ModelConfig& config, const Checkpoint& checkpoint) {
  const std::string where = checkpoint.directory() + " (for " + config.source + ")";
  // A layer count past the checkpoint's is refused before a name is made for
  // every tensor it implies (a million layers would be gigabytes of names).
  if (const int64_t stored = stored_layers(checkpoint); config.num_layers > stored)
    return not_found(where + ": config.json says " + std::to_string(config.num_layers) +
                     " layers (num_hidden_layers) but the checkpoint holds tensors of " + std::to_string(stored) +
                     (stored > 0 ? " (model.layers.0 to " + std::to_string(stored - 1) + ")" : ""));
  const std::vector<TensorSpec> specs = expected_tensors(config);

  std::vector<std::string> missing;
  for (const TensorSpec& spec : specs)
    if (checkpoint.find(spec.name) == nullptr) missing.push_back(spec.name);
  if (!missing.empty()) {
    std::string hint;
    if (missing.size() == 1 && missing[0] == "lm_head.weight")
      hint = " (config.json says tie_word_embeddings is false)";
    return not_found(where + ": " + std::to_string(missing.size()) + " tensor(s) the " +
                     std::string(model_architecture_name(config.architecture)) +
                     " architecture needs are missing: " + list_of(missing) + hint);
  }

  std::set<std::string, std::less<>> expected;
  for (const TensorSpec& spec : specs) expected.insert(spec.name);
  // A tied checkpoint may still store its LM head (Qwen3-0.6B and -1.7B do):
  // transformers ties it to the embeddings and never reads it, and so do we.
  if (const TensorView* head = checkpoint.find("lm_head.weight"); head != nullptr && config.tie_word_embeddings) {
    const TensorView& embed = *checkpoint.find("model.embed_tokens.weight");
    if (head->shape != embed.shape)
      return invalid_argument(where + ": " + head->file + ": 'lm_head.weight' has shape " + shape_text(head->shape) +
                              ", not the embeddings' " + shape_text(embed.shape) +
                              " that config.json ties it to (tie_word_embeddings)");
    // A sample of rows, not all: the copy is never read otherwise (311 MB for Qwen3-0.6B).
    const size_t rows = static_cast<size_t>(embed.shape.empty() ? 0 : embed.shape[0]);
    const size_t step = std::max<size_t>(1, rows / 64);
    const size_t cols = rows > 0 ? static_cast<size_t>(embed.elements()) / rows : 0;
    const auto same_row = [&](size_t r) { return same_values(*head, embed, r * cols, cols); };
    bool same = true;
    for (size_t r = 0; same && r < rows; r += step) same = same_row(r);
    if (same && rows > 0) same = same_row(rows - 1);
    if (!same)
      log(LogLevel::kWarning, "model",
          where + ": 'lm_head.weight' differs from the embeddings; config.json ties them "
                  "(tie_word_embeddings), so the embeddings are the LM head, as in transformers");
    expected.insert("lm_head.weight");
  }
  std::vector<std::string> extra;
  for (const std::string& name : checkpoint.names())
    if (!expected.contains(name) && !is_ignored_buffer(name))
      extra.push_back(quote_for_message(name) + " in " + checkpoint.find(name)->file);
  if (!extra.empty())
    return invalid_argument(where + ": " + std::to_string(extra.size()) + " tensor(s) the " +
                            std::string(model_architecture_name(config.architecture)) +
                            " architecture does not use: " + list_of(extra));

  std::vector<std::string> wrong;
  for (const TensorSpec& spec : specs) {
    const TensorView& view = *checkpoint.find(spec.name);
    if (view.shape != spec.shape)
      wrong.push_back(view.file + ": '" + spec.name + "' has shape " + shape_text(view.shape) + ", expected " +
                      shape_text(spec.shape));
    else if (!dtype_is_loadable(view.dtype))
      wrong.push_back(view.file + ": '" + spec.name + "' has dtype " + std::string(tensor_dtype_name(view.dtype)));
  }
  if (!wrong.empty()) return invalid_argument(where + ": " + list_of(wrong));

  const auto get = [&](const std::string& name) { return *checkpoint.find(name); };
  const auto get_if = [&](bool present, const std::string& name) -> std::optional<TensorView> {
    if (!present) return std::nullopt;
    return get(name);
  };
  ModelWeights w;
  w.embed_tokens = get("model.embed_tokens.weight");
  w.layers.reserve(static_cast<size_t>(config.num_layers));
  for (int layer = 0; layer < config.num_layers; ++layer) {
    const std::string p = layer_prefix(layer);
    ModelWeights::Layer l;
    l.input_layernorm = get(p + "input_layernorm.weight");
    l.q_proj = get(p + "self_attn.q_proj.weight");
    l.k_proj = get(p + "self_attn.k_proj.weight");
    l.v_proj = get(p + "self_attn.v_proj.weight");
    l.q_proj_bias = get_if(config.qkv_bias, p + "self_attn.q_proj.bias");
    l.k_proj_bias = get_if(config.qkv_bias, p + "self_attn.k_proj.bias");
    l.v_proj_bias = get_if(config.qkv_bias, p + "self_attn.v_proj.bias");
    l.q_norm = get_if(config.qk_norm, p + "self_attn.q_norm.weight");
    l.k_norm = get_if(config.qk_norm, p + "self_attn.k_norm.weight");
    l.o_proj = get(p + "self_attn.o_proj.weight");
    l.o_proj_bias = get_if(config.o_bias, p + "self_attn.o_proj.bias");
    l.post_attention_layernorm = get(p + "post_attention_layernorm.weight");
    l.gate_proj = get(p + "mlp.gate_proj.weight");
    l.up_proj = get(p + "mlp.up_proj.weight");
    l.down_proj = get(p + "mlp.down_proj.weight");
    w.layers.push_back(std::move(l));
  }
  w.final_norm = get("model.norm.weight");
  w.lm_head = config.tie_word_embeddings ? w.embed_tokens : get("lm_head.weight");
  return w;
}

}  // namespace hiq
