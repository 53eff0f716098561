#include "model/cpu_forward.h"

#include <cmath>
#include <string>

#include "codec/numeric.h"

namespace hiq {
namespace {

Status check_matrix(const cpu::MatrixView& m, int64_t rows, int64_t cols, const std::string& what) {
  if (m.data == nullptr) return invalid_argument(what + " is missing");
  if (m.rows != rows || m.cols != cols)
    return invalid_argument(what + " is [" + std::to_string(m.rows) + ", " + std::to_string(m.cols) + "], expected [" +
                            std::to_string(rows) + ", " + std::to_string(cols) + "]");
  return Status::ok();
}

Status check_vector(const cpu::VectorView& v, int64_t size, const std::string& what, bool required) {
  if (v.data == nullptr) return required ? invalid_argument(what + " is missing") : Status::ok();
  if (v.size != size)
    return invalid_argument(what + " has " + std::to_string(v.size) + " elements, expected " + std::to_string(size));
  return Status::ok();
}

// The BF16 rounding of a stored tensor.
void store(std::vector<float>& x) { cpu::round_to_bf16(x.data(), x.size()); }

}  // namespace

Status check_weights(const ModelShape& s, const CpuModelWeights& w) {
  if (s.num_layers <= 0 || s.hidden_size <= 0 || s.num_heads <= 0 || s.num_kv_heads <= 0 || s.head_dim <= 0 ||
      s.num_heads % s.num_kv_heads != 0 || s.vocab_size <= 0 || s.intermediate_size <= 0)
    return invalid_argument("model shape is inconsistent");
  if (static_cast<int>(s.rope.inv_freq.size()) != s.head_dim / 2) return invalid_argument("rope table does not fit head_dim");
  if (static_cast<int>(w.layers.size()) != s.num_layers)
    return invalid_argument(std::to_string(w.layers.size()) + " layers of weights for a " +
                            std::to_string(s.num_layers) + "-layer model");
  const int64_t hidden = s.hidden_size, q_out = int64_t{s.num_heads} * s.head_dim,
                kv_out = int64_t{s.num_kv_heads} * s.head_dim;
  HIQ_RETURN_IF_ERROR(check_matrix(w.embed_tokens, s.vocab_size, hidden, "embed_tokens"));
  HIQ_RETURN_IF_ERROR(check_matrix(w.lm_head, s.vocab_size, hidden, "lm_head"));
  HIQ_RETURN_IF_ERROR(check_vector(w.final_norm, hidden, "norm", true));
  for (int i = 0; i < s.num_layers; ++i) {
    const LayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::string p = "layer " + std::to_string(i) + " ";
    HIQ_RETURN_IF_ERROR(check_vector(l.input_norm, hidden, p + "input_layernorm", true));
    HIQ_RETURN_IF_ERROR(check_matrix(l.q_proj, q_out, hidden, p + "q_proj"));
    HIQ_RETURN_IF_ERROR(check_matrix(l.k_proj, kv_out, hidden, p + "k_proj"));
    HIQ_RETURN_IF_ERROR(check_matrix(l.v_proj, kv_out, hidden, p + "v_proj"));
    HIQ_RETURN_IF_ERROR(check_vector(l.q_bias, q_out, p + "q_proj.bias", false));
    HIQ_RETURN_IF_ERROR(check_vector(l.k_bias, kv_out, p + "k_proj.bias", false));
    HIQ_RETURN_IF_ERROR(check_vector(l.v_bias, kv_out, p + "v_proj.bias", false));
    HIQ_RETURN_IF_ERROR(check_vector(l.q_norm, s.head_dim, p + "q_norm", s.qk_norm));
    HIQ_RETURN_IF_ERROR(check_vector(l.k_norm, s.head_dim, p + "k_norm", s.qk_norm));
    HIQ_RETURN_IF_ERROR(check_matrix(l.o_proj, hidden, q_out, p + "o_proj"));
    HIQ_RETURN_IF_ERROR(check_vector(l.o_bias, hidden, p + "o_proj.bias", false));
    HIQ_RETURN_IF_ERROR(check_vector(l.post_attention_norm, hidden, p + "post_attention_layernorm", true));
    HIQ_RETURN_IF_ERROR(check_matrix(l.gate_proj, s.intermediate_size, hidden, p + "gate_proj"));
    HIQ_RETURN_IF_ERROR(check_matrix(l.up_proj, s.intermediate_size, hidden, p + "up_proj"));
    HIQ_RETURN_IF_ERROR(check_matrix(l.down_proj, hidden, s.intermediate_size, p + "down_proj"));
  }
  return Status::ok();
}

Status check_sequence(const ModelShape& s, const DeviceKvPool& l1, std::span<const int32_t> tokens,
                      std::span<const SlotId> slots, size_t first_new) {
  const size_t n = tokens.size();
  if (slots.size() != n) return invalid_argument("forward: one L1 slot per token is needed");
  if (first_new >= n) return invalid_argument("forward: no new token to compute");
  const KvGeometry& g = l1.geometry();
  if (g.num_layers != s.num_layers || g.row_shape(KvPart::kK) != RowShape{s.num_kv_heads, s.head_dim} ||
      g.row_shape(KvPart::kV) != RowShape{s.num_kv_heads, s.head_dim})
    return invalid_argument("forward: the L1 pool's KV geometry is not this model's");
  for (int32_t t : tokens)
    if (t < 0 || t >= s.vocab_size)
      return out_of_range("token id " + std::to_string(t) + " is outside the vocabulary of " +
                          std::to_string(s.vocab_size));
  for (SlotId slot : slots)
    if (slot >= l1.num_slots())
      return out_of_range("forward: L1 slot " + std::to_string(slot) + " is outside the pool of " +
                          std::to_string(l1.num_slots()));
  return Status::ok();
}

Result<std::vector<float>> cpu_forward(const ModelShape& s, const CpuModelWeights& w, DeviceKvPool& l1,
                                       std::span<const int32_t> tokens, std::span<const SlotId> slots,
                                       size_t first_new, bool all_logits, const BeforeAttention& before_attention) {
  return cpu_forward_rank(s, w, l1, tokens, slots, first_new, all_logits, before_attention, nullptr, true);
}

Result<std::vector<float>> cpu_forward_rank(const ModelShape& s, const CpuModelWeights& w, DeviceKvPool& l1,
                                            std::span<const int32_t> tokens, std::span<const SlotId> slots,
                                            size_t first_new, bool all_logits, const BeforeAttention& before_attention,
                                            const RankAllReduce& all_reduce, bool want_logits) {
  HIQ_RETURN_IF_ERROR(check_sequence(s, l1, tokens, slots, first_new));
  const size_t n = tokens.size();

  const auto n_new = static_cast<int64_t>(n - first_new);
  const int64_t hidden = s.hidden_size, q_out = int64_t{s.num_heads} * s.head_dim,
                kv_out = int64_t{s.num_kv_heads} * s.head_dim, inter = s.intermediate_size;
  const std::span<const SlotId> new_slots = slots.subspan(first_new);
  const cpu::VectorView no_bias;

  // The residual stream of the new tokens: their embedding rows.
  std::vector<float> h(static_cast<size_t>(n_new * hidden));
  for (int64_t t = 0; t < n_new; ++t)
    cpu::read_row(w.embed_tokens, tokens[first_new + static_cast<size_t>(t)], h.data() + t * hidden);

  std::vector<float> x(h.size()), q(static_cast<size_t>(n_new * q_out)), k(static_cast<size_t>(n_new * kv_out)),
      v(k.size()), attn(q.size()), o(h.size()), gate(static_cast<size_t>(n_new * inter)), up(gate.size());
  std::vector<uint16_t> rows(static_cast<size_t>(std::max<int64_t>(n_new, static_cast<int64_t>(n)) * kv_out));
  std::vector<float> keys(static_cast<size_t>(static_cast<int64_t>(n) * kv_out)), values(keys.size());
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));

  for (int layer = 0; layer < s.num_layers; ++layer) {
    const LayerWeights& l = w.layers[static_cast<size_t>(layer)];
    cpu::rms_norm(h.data(), n_new, hidden, l.input_norm, s.rms_norm_eps, x.data(), true);
    store(x);
    cpu::matmul(x.data(), n_new, l.q_proj, l.q_bias, q.data());
    cpu::matmul(x.data(), n_new, l.k_proj, l.k_bias, k.data());
    cpu::matmul(x.data(), n_new, l.v_proj, l.v_bias, v.data());
    store(q), store(k), store(v);
    if (s.qk_norm) {
      cpu::rms_norm(q.data(), n_new * s.num_heads, s.head_dim, l.q_norm, s.rms_norm_eps, q.data(), true);
      cpu::rms_norm(k.data(), n_new * s.num_kv_heads, s.head_dim, l.k_norm, s.rms_norm_eps, k.data(), true);
      store(q), store(k);
    }
    for (int64_t t = 0; t < n_new; ++t) {
      const auto position = static_cast<int64_t>(first_new) + t;
      cpu::apply_rope(q.data() + t * q_out, s.num_heads, s.head_dim, position, s.rope);
      cpu::apply_rope(k.data() + t * kv_out, s.num_kv_heads, s.head_dim, position, s.rope);
    }
    store(q), store(k);

    // New K and V into their L1 slots, then the whole context back from L1
    // (once the caller says this layer of the prefix is there).
    if (before_attention) HIQ_RETURN_IF_ERROR(before_attention(layer));
    for (int p = 0; p < 2; ++p) {
      const std::vector<float>& src = p == 0 ? k : v;
      for (size_t i = 0; i < src.size(); ++i) rows[i] = numeric::float_to_bf16(src[i]);
      HIQ_RETURN_IF_ERROR(l1.write_rows(layer, static_cast<KvPart>(p), new_slots, rows.data()));
    }
    for (int p = 0; p < 2; ++p) {
      HIQ_RETURN_IF_ERROR(l1.read_rows(layer, static_cast<KvPart>(p), slots, rows.data()));
      std::vector<float>& dst = p == 0 ? keys : values;
      for (size_t i = 0; i < dst.size(); ++i) dst[i] = numeric::bf16_to_float(rows[i]);
    }
    cpu::attention(q.data(), n_new, keys.data(), values.data(), static_cast<int64_t>(n), s.num_heads, s.num_kv_heads,
                   s.head_dim, static_cast<int64_t>(first_new), scale, attn.data());
    store(attn);
    // One rank's o_proj sees its heads alone: a partial sum, the bias added to the whole.
    cpu::matmul(attn.data(), n_new, l.o_proj, all_reduce ? no_bias : l.o_bias, o.data());
    store(o);
    if (all_reduce) HIQ_RETURN_IF_ERROR(all_reduce(o, l.o_bias));
    for (size_t i = 0; i < h.size(); ++i) h[i] += o[i];
    store(h);

    cpu::rms_norm(h.data(), n_new, hidden, l.post_attention_norm, s.rms_norm_eps, x.data(), true);
    store(x);
    cpu::matmul(x.data(), n_new, l.gate_proj, no_bias, gate.data());
    cpu::matmul(x.data(), n_new, l.up_proj, no_bias, up.data());
    store(gate), store(up);
    cpu::silu_mul(gate.data(), up.data(), gate.size(), gate.data());
    store(gate);
    cpu::matmul(gate.data(), n_new, l.down_proj, no_bias, o.data());
    store(o);
    if (all_reduce) HIQ_RETURN_IF_ERROR(all_reduce(o, no_bias));
    for (size_t i = 0; i < h.size(); ++i) h[i] += o[i];
    store(h);
  }
  if (!want_logits) return std::vector<float>{};

  const int64_t first_out = all_logits ? 0 : n_new - 1, outputs = n_new - first_out;
  cpu::rms_norm(h.data() + first_out * hidden, outputs, hidden, w.final_norm, s.rms_norm_eps, x.data(), true);
  std::vector<float> normed(x.begin(), x.begin() + outputs * hidden);
  store(normed);
  std::vector<float> logits(static_cast<size_t>(outputs * s.vocab_size));
  cpu::matmul(normed.data(), outputs, w.lm_head, no_bias, logits.data());
  return logits;
}

}  // namespace hiq
