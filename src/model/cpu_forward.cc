#include "model/cpu_forward.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "codec/numeric.h"
#include "core/parallel.h"

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

namespace {

// Where a sequence's new tokens sit in the batch's rows.
struct SequenceRows {
  int64_t first_row = 0, rows = 0;  // new tokens, in the batch's activations
  int64_t first_out = 0;            // the first row it wants logits of, within its own rows
};

// A pass of at most this many rows (a decode step's) runs its layers on a
// team of threads (team_layers): its steps take a few microseconds each, too
// short to hand out one at a time. A longer pass hands out its loops, whose
// chunks a slowed-down core leaves to the others.
constexpr int64_t kTeamRows = 32;

// What the ranks of team_layers share: the pass, its activations, and an
// error from waiting for a restore (rank 0's, read after a barrier).
struct TeamPass {
  const ModelShape& s;
  const CpuModelWeights& w;
  DeviceKvPool& l1;
  std::span<const CpuSequence> batch;
  std::span<const SequenceRows> at;
  std::span<const SlotId> row_slots;    // each row's L1 slot
  std::span<const int64_t> positions;  // each row's position
  std::vector<float>& h;                // [rows][hidden], the residual stream
  std::vector<float> q, k, v, attn, o, gate, up;
  cpu::AttentionPartials partials;
  Status failed;

  void size_activations() {
    const auto rows = row_slots.size(), heads = static_cast<size_t>(s.num_heads),
               kv_heads = static_cast<size_t>(s.num_kv_heads), d = static_cast<size_t>(s.head_dim),
               inter = static_cast<size_t>(s.intermediate_size);
    for (auto* a : {&q, &attn}) a->resize(rows * heads * d);
    for (auto* a : {&k, &v}) a->resize(rows * kv_heads * d);
    for (auto* a : {&gate, &up}) a->resize(rows * inter);
    o.resize(h.size());
  }
};

// Rounds x[t · stride + first, t · stride + last) to BF16 for each of `rows` rows.
void store_columns(float* x, int64_t rows, int64_t stride, int64_t first, int64_t last) {
  for (int64_t t = 0; t < rows; ++t) cpu::round_to_bf16(x + t * stride + first, static_cast<size_t>(last - first));
}

// h += o on columns [first, last) of every row, each sum rounded to BF16, o
// rounded first: a product's output joining the residual stream.
void add_columns(float* h, float* o, int64_t rows, int64_t hidden, int64_t first, int64_t last) {
  store_columns(o, rows, hidden, first, last);
  for (int64_t t = 0; t < rows; ++t) {
    cpu::add_into(h + t * hidden + first, o + t * hidden + first, static_cast<size_t>(last - first));
    cpu::round_to_bf16(h + t * hidden + first, static_cast<size_t>(last - first));
  }
}

// One rank's part of every layer: the same steps as the loop in
// forward_batch, and the same bits (each value computed by the same
// functions whichever rank computes it). A rank normalises the whole
// residual stream itself (a few thousand values), computes chunks of each
// product and the small steps of what it computed, and waits at a barrier
// only where it reads what other ranks wrote: five or six times a layer.
void team_layers(Team& team, TeamPass& p) {
  const ModelShape& s = p.s;
  const auto rows = static_cast<int64_t>(p.row_slots.size());
  const int64_t hidden = s.hidden_size, d = s.head_dim, q_out = int64_t{s.num_heads} * d,
                kv_out = int64_t{s.num_kv_heads} * d, inter = s.intermediate_size;
  const cpu::VectorView no_bias;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const bool restores =
      std::any_of(p.batch.begin(), p.batch.end(), [](const CpuSequence& seq) { return bool(seq.before_attention); });
  // This rank's: the normalised stream (then the rounded attention output),
  // and each row's rotation.
  std::vector<float> x(static_cast<size_t>(rows * std::max(hidden, q_out))), cos(static_cast<size_t>(rows * d / 2)),
      sin(cos.size());
  for (int64_t t = 0; t < rows; ++t)
    cpu::rope_angles(p.positions[static_cast<size_t>(t)], s.rope, cos.data() + t * d / 2, sin.data() + t * d / 2);
  std::vector<cpu::AttentionSequence> attention(p.batch.size());
  // Products are taken in chunks of whole heads (q|k|v) or of 16 rows.
  constexpr int64_t kRowUnit = 16;

  for (int layer = 0; layer < s.num_layers; ++layer) {
    const LayerWeights& l = p.w.layers[static_cast<size_t>(layer)];
    // This layer's restores are waited for before any rank writes its new K
    // and V into L1, as the loop in forward_batch waits before it writes.
    if (team.rank() == 0)
      for (const CpuSequence& seq : p.batch)
        if (seq.before_attention && p.failed.is_ok()) p.failed = seq.before_attention(layer);
    cpu::rms_norm(p.h.data(), rows, hidden, l.input_norm, s.rms_norm_eps, x.data(), true);
    cpu::round_to_bf16(x.data(), static_cast<size_t>(rows * hidden));
    if (restores) {
      team.barrier();
      if (!p.failed.is_ok()) return;  // every rank sees it after the same barrier
    }

    // q, k and v by heads, each normalised, rotated and (K, V) written to L1.
    const cpu::Product qkv_products[] = {{l.q_proj, l.q_bias, p.q.data()}, {l.k_proj, l.k_bias, p.k.data()},
                                         {l.v_proj, l.v_bias, p.v.data()}};
    const cpu::Products qkv(x.data(), rows, qkv_products);
    team.for_chunks(qkv.rows(), d, [&](int64_t first, int64_t last) {
      qkv.run(first, last);
      for (int64_t unit = first / d; unit < last / d; ++unit) {
        const bool is_q = unit < s.num_heads, is_k = !is_q && unit < s.num_heads + s.num_kv_heads;
        const int64_t head = is_q ? unit : is_k ? unit - s.num_heads : unit - s.num_heads - s.num_kv_heads;
        float* base = (is_q ? p.q : is_k ? p.k : p.v).data() + head * d;
        const int64_t stride = is_q ? q_out : kv_out;
        for (int64_t t = 0; t < rows; ++t) {
          float* y = base + t * stride;
          cpu::round_to_bf16(y, static_cast<size_t>(d));
          if (is_q || is_k) {
            if (s.qk_norm) {
              cpu::rms_norm(y, 1, d, is_q ? l.q_norm : l.k_norm, s.rms_norm_eps, y, true);
              cpu::round_to_bf16(y, static_cast<size_t>(d));
            }
            cpu::rotate_half(y, 1, static_cast<int>(d), cos.data() + t * d / 2, sin.data() + t * d / 2);
            cpu::round_to_bf16(y, static_cast<size_t>(d));
          }
          if (!is_q) {
            const KvPart part = is_k ? KvPart::kK : KvPart::kV;
            uint16_t* kv = p.l1.row(layer, part, p.row_slots[static_cast<size_t>(t)]) + head * d;
            for (int64_t e = 0; e < d; ++e) kv[e] = numeric::float_to_bf16(y[e]);
          }
        }
      }
    });

    for (size_t i = 0; i < p.batch.size(); ++i) {
      const CpuSequence& seq = p.batch[i];
      attention[i] = cpu::AttentionSequence{p.q.data() + p.at[i].first_row * q_out, p.at[i].rows,
                                            p.l1.plane(layer, KvPart::kK), p.l1.plane(layer, KvPart::kV),
                                            seq.slots.data(), static_cast<int64_t>(seq.tokens.size()),
                                            static_cast<int64_t>(seq.first_new),
                                            p.attn.data() + p.at[i].first_row * q_out};
    }
    cpu::attention(attention, s.num_heads, s.num_kv_heads, static_cast<int>(d), scale, &team, &p.partials);
    std::copy_n(p.attn.begin(), rows * q_out, x.begin());
    cpu::round_to_bf16(x.data(), static_cast<size_t>(rows * q_out));

    const cpu::Product o_product{l.o_proj, l.o_bias, p.o.data()};
    const cpu::Products o_proj(x.data(), rows, std::span(&o_product, 1));
    team.for_chunks(hidden, kRowUnit, [&](int64_t first, int64_t last) {
      o_proj.run(first, last);
      add_columns(p.h.data(), p.o.data(), rows, hidden, first, last);
    });

    cpu::rms_norm(p.h.data(), rows, hidden, l.post_attention_norm, s.rms_norm_eps, x.data(), true);
    cpu::round_to_bf16(x.data(), static_cast<size_t>(rows * hidden));
    // gate|up as one product whose rows j and inter + j go to one chunk.
    const cpu::Product gate_up_products[] = {{l.gate_proj, no_bias, p.gate.data()}, {l.up_proj, no_bias, p.up.data()}};
    const cpu::Products gate_up(x.data(), rows, gate_up_products);
    team.for_chunks(inter, kRowUnit, [&](int64_t first, int64_t last) {
      gate_up.run(first, last);
      gate_up.run(inter + first, inter + last);
      store_columns(p.gate.data(), rows, inter, first, last);
      store_columns(p.up.data(), rows, inter, first, last);
      for (int64_t t = 0; t < rows; ++t) {
        float* g = p.gate.data() + t * inter + first;
        cpu::silu_mul(g, p.up.data() + t * inter + first, static_cast<size_t>(last - first), g);
      }
      store_columns(p.gate.data(), rows, inter, first, last);
    });

    const cpu::Product down_product{l.down_proj, no_bias, p.o.data()};
    const cpu::Products down(p.gate.data(), rows, std::span(&down_product, 1));
    team.for_chunks(hidden, kRowUnit, [&](int64_t first, int64_t last) {
      down.run(first, last);
      add_columns(p.h.data(), p.o.data(), rows, hidden, first, last);
    });
  }
}

// Moves the rows each sequence wants logits of to the front of `a` (rows of
// `width`), sequence by sequence, and drops the rest.
void keep_wanted_rows(std::span<const SequenceRows> at, int64_t width, std::vector<float>& a) {
  int64_t kept = 0;
  for (const SequenceRows& r : at) {
    const int64_t n = r.rows - r.first_out;
    const auto from = a.begin() + (r.first_row + r.first_out) * width;
    std::copy(from, from + n * width, a.begin() + kept * width);  // forwards: never past its source
    kept += n;
  }
  a.resize(static_cast<size_t>(kept * width));
}

// The logits of the rows each sequence wants (none without `want_logits`),
// from the residual stream after the last layer.
std::vector<std::vector<float>> logits_of(const ModelShape& s, const CpuModelWeights& w,
                                          std::span<const SequenceRows> at, int64_t total_out,
                                          const std::vector<float>& h, bool want_logits) {
  const int64_t hidden = s.hidden_size;
  std::vector<std::vector<float>> logits(at.size());
  if (!want_logits) return logits;

  // The rows each sequence wants logits of, gathered for one LM head product.
  std::vector<float> normed(static_cast<size_t>(total_out * hidden));
  int64_t out_row = 0;
  for (const SequenceRows& r : at) {
    const int64_t n = r.rows - r.first_out;
    cpu::rms_norm(h.data() + (r.first_row + r.first_out) * hidden, n, hidden, w.final_norm, s.rms_norm_eps,
                  normed.data() + out_row * hidden, true);
    out_row += n;
  }
  store(normed);
  std::vector<float> all(static_cast<size_t>(total_out * s.vocab_size));
  cpu::matmul(normed.data(), total_out, w.lm_head, cpu::VectorView{}, all.data());
  out_row = 0;
  for (size_t i = 0; i < at.size(); ++i) {
    const int64_t n = at[i].rows - at[i].first_out;
    logits[i].assign(all.begin() + out_row * s.vocab_size, all.begin() + (out_row + n) * s.vocab_size);
    out_row += n;
  }
  return logits;
}

// Every sequence of `batch` through the layers, their new tokens sharing the
// products; the logits of each (none without `want_logits`).
Result<std::vector<std::vector<float>>> forward_batch(const ModelShape& s, const CpuModelWeights& w, DeviceKvPool& l1,
                                                      std::span<const CpuSequence> batch,
                                                      const RankAllReduce& all_reduce, bool want_logits) {
  std::vector<SequenceRows> at(batch.size());
  int64_t total = 0, total_out = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const CpuSequence& seq = batch[i];
    HIQ_RETURN_IF_ERROR(check_sequence(s, l1, seq.tokens, seq.slots, seq.first_new));
    const auto n_new = static_cast<int64_t>(seq.tokens.size() - seq.first_new);
    at[i] = SequenceRows{total, n_new, seq.all_logits ? 0 : n_new - 1};
    total += n_new;
    total_out += n_new - at[i].first_out;
  }
  if (batch.empty()) return std::vector<std::vector<float>>{};
  // A slot a token of the batch writes is written once and read by no other
  // sequence: the sequences write their layer before any attention reads
  // (cpu_forward_batch), so a slot both written and read in one batch would
  // depend on that order.
  std::vector<SlotId> written;
  written.reserve(static_cast<size_t>(total));
  for (const CpuSequence& seq : batch)
    written.insert(written.end(), seq.slots.begin() + static_cast<std::ptrdiff_t>(seq.first_new), seq.slots.end());
  std::sort(written.begin(), written.end());
  const auto twice = std::adjacent_find(written.begin(), written.end());
  if (twice != written.end())
    return invalid_argument("forward: L1 slot " + std::to_string(*twice) + " is written by two tokens of the pass");
  for (const CpuSequence& seq : batch)
    for (size_t j = 0; j < seq.first_new; ++j)
      if (std::binary_search(written.begin(), written.end(), seq.slots[j]))
        return invalid_argument("forward: L1 slot " + std::to_string(seq.slots[j]) +
                                " is both context and a new token's in one pass");

  const int64_t hidden = s.hidden_size, q_out = int64_t{s.num_heads} * s.head_dim,
                kv_out = int64_t{s.num_kv_heads} * s.head_dim, inter = s.intermediate_size;
  const cpu::VectorView no_bias;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));

  // Each row's position: its sequence's first new one, then on.
  std::vector<int64_t> positions(static_cast<size_t>(total));
  for (size_t i = 0; i < batch.size(); ++i)
    for (int64_t t = 0; t < at[i].rows; ++t)
      positions[static_cast<size_t>(at[i].first_row + t)] = static_cast<int64_t>(batch[i].first_new) + t;

  // The residual stream of the new tokens: their embedding rows.
  std::vector<float> h(static_cast<size_t>(total * hidden));
  for (size_t i = 0; i < batch.size(); ++i)
    for (int64_t t = 0; t < at[i].rows; ++t)
      cpu::read_row(w.embed_tokens, batch[i].tokens[batch[i].first_new + static_cast<size_t>(t)],
                    h.data() + (at[i].first_row + t) * hidden);

  // The team writes K and V into L1's planes in place, each rank the heads
  // it computed (a pool in host memory: its planes are its memory), where
  // the loops below go through write_rows. A rank waiting on a restore holds
  // the pool's threads at a barrier meanwhile (they sleep after 200 µs).
  if (total <= kTeamRows && parallel_threads() > 1 && l1.host_accessible() && !all_reduce) {
    std::vector<SlotId> row_slots(static_cast<size_t>(total));
    for (size_t i = 0; i < batch.size(); ++i)
      std::copy(batch[i].slots.begin() + static_cast<std::ptrdiff_t>(batch[i].first_new), batch[i].slots.end(),
                row_slots.begin() + at[i].first_row);
    TeamPass pass{s, w, l1, batch, at, row_slots, positions, h, {}, {}, {}, {}, {}, {}, {}, {}, Status::ok()};
    pass.size_activations();
    parallel_team([&](Team& team) { team_layers(team, pass); });
    HIQ_RETURN_IF_ERROR(pass.failed);
    return logits_of(s, w, at, total_out, h, want_logits);
  }

  int64_t live = total;  // the rows the layers compute: all, until the last layer's wanted ones
  std::vector<float> x(h.size()), q(static_cast<size_t>(total * q_out)), k(static_cast<size_t>(total * kv_out)),
      v(k.size()), attn(q.size()), o(h.size()), gate(static_cast<size_t>(total * inter)), up(gate.size());
  // A pool the CPU cannot read directly gives each sequence's context K and
  // V back into these (its rows in context order).
  std::vector<std::vector<uint16_t>> copied(l1.host_accessible() ? 0 : 2 * batch.size());
  std::vector<uint16_t> rows;
  std::vector<cpu::AttentionSequence> attention(batch.size());

  for (int layer = 0; layer < s.num_layers; ++layer) {
    const LayerWeights& l = w.layers[static_cast<size_t>(layer)];
    cpu::rms_norm(h.data(), total, hidden, l.input_norm, s.rms_norm_eps, x.data(), true);
    store(x);
    const cpu::Product qkv[] = {{l.q_proj, l.q_bias, q.data()}, {l.k_proj, l.k_bias, k.data()},
                                {l.v_proj, l.v_bias, v.data()}};
    cpu::matmuls(x.data(), total, qkv);
    store(q), store(k), store(v);
    if (s.qk_norm) {
      cpu::rms_norm(q.data(), total * s.num_heads, s.head_dim, l.q_norm, s.rms_norm_eps, q.data(), true);
      cpu::rms_norm(k.data(), total * s.num_kv_heads, s.head_dim, l.k_norm, s.rms_norm_eps, k.data(), true);
      store(q), store(k);
    }
    cpu::apply_rope_rows(q.data(), k.data(), total, positions.data(), s.num_heads, s.num_kv_heads, s.head_dim,
                         s.rope);
    store(q), store(k);

    // Each sequence's new K and V into their L1 slots; attention then reads
    // its whole context from L1 (once the caller says this layer of its
    // prefix is there), in place where the pool is host memory. Past the
    // last layer's K and V a row matters only for its logits: that layer's
    // attention and the rest of it run on the rows whose logits are wanted,
    // their outputs packed in batch order (a row's values are the same bits
    // whichever rows are computed with it).
    const bool wanted_only = layer == s.num_layers - 1 && total_out < live;
    int64_t packed = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      const CpuSequence& seq = batch[i];
      if (seq.before_attention) HIQ_RETURN_IF_ERROR(seq.before_attention(layer));
      const std::span<const SlotId> new_slots = seq.slots.subspan(seq.first_new);
      const size_t first = static_cast<size_t>(at[i].first_row * kv_out);
      rows.resize(new_slots.size() * static_cast<size_t>(kv_out));
      for (int p = 0; p < 2; ++p) {
        const std::vector<float>& src = p == 0 ? k : v;
        for (size_t e = 0; e < rows.size(); ++e) rows[e] = numeric::float_to_bf16(src[first + e]);
        HIQ_RETURN_IF_ERROR(l1.write_rows(layer, static_cast<KvPart>(p), new_slots, rows.data()));
      }
      const int64_t skipped = wanted_only ? at[i].first_out : 0;  // leading rows whose logits are not wanted
      cpu::AttentionSequence& a = attention[i];
      a = cpu::AttentionSequence{q.data() + (at[i].first_row + skipped) * q_out, at[i].rows - skipped, nullptr,
                                 nullptr, nullptr, static_cast<int64_t>(seq.tokens.size()),
                                 static_cast<int64_t>(seq.first_new) + skipped,
                                 attn.data() + (wanted_only ? packed : at[i].first_row) * q_out};
      packed += at[i].rows - skipped;
      if (l1.host_accessible()) {
        a.k = l1.plane(layer, KvPart::kK);
        a.v = l1.plane(layer, KvPart::kV);
        a.slots = seq.slots.data();
        continue;
      }
      for (int p = 0; p < 2; ++p) {
        std::vector<uint16_t>& context = copied[2 * i + static_cast<size_t>(p)];
        context.resize(seq.tokens.size() * static_cast<size_t>(kv_out));
        HIQ_RETURN_IF_ERROR(l1.read_rows(layer, static_cast<KvPart>(p), seq.slots, context.data()));
        (p == 0 ? a.k : a.v) = context.data();
      }
    }
    cpu::attention(attention, s.num_heads, s.num_kv_heads, s.head_dim, scale);
    if (wanted_only) {
      live = total_out;
      attn.resize(static_cast<size_t>(live * q_out));
      keep_wanted_rows(at, hidden, h);
      for (auto* a : {&x, &o}) a->resize(h.size());
      for (auto* a : {&gate, &up}) a->resize(static_cast<size_t>(live * inter));
      int64_t first = 0;
      for (SequenceRows& r : at) {
        r = SequenceRows{first, r.rows - r.first_out, 0};
        first += r.rows;
      }
    }
    store(attn);
    // One rank's o_proj sees its heads alone: a partial sum, the bias added to the whole.
    cpu::matmul(attn.data(), live, l.o_proj, all_reduce ? no_bias : l.o_bias, o.data());
    store(o);
    if (all_reduce) HIQ_RETURN_IF_ERROR(all_reduce(o, l.o_bias));
    cpu::add_into(h.data(), o.data(), h.size());
    store(h);

    cpu::rms_norm(h.data(), live, hidden, l.post_attention_norm, s.rms_norm_eps, x.data(), true);
    store(x);
    const cpu::Product gate_up[] = {{l.gate_proj, no_bias, gate.data()}, {l.up_proj, no_bias, up.data()}};
    cpu::matmuls(x.data(), live, gate_up);
    store(gate), store(up);
    cpu::silu_mul(gate.data(), up.data(), gate.size(), gate.data());
    store(gate);
    cpu::matmul(gate.data(), live, l.down_proj, no_bias, o.data());
    store(o);
    if (all_reduce) HIQ_RETURN_IF_ERROR(all_reduce(o, no_bias));
    cpu::add_into(h.data(), o.data(), h.size());
    store(h);
  }
  return logits_of(s, w, at, total_out, h, want_logits);
}

}  // namespace

Result<std::vector<float>> cpu_forward(const ModelShape& s, const CpuModelWeights& w, DeviceKvPool& l1,
                                       std::span<const int32_t> tokens, std::span<const SlotId> slots,
                                       size_t first_new, bool all_logits, const BeforeAttention& before_attention) {
  const CpuSequence one{tokens, slots, first_new, all_logits, before_attention};
  HIQ_ASSIGN_OR_RETURN(std::vector<std::vector<float>> logits, forward_batch(s, w, l1, std::span(&one, 1), nullptr, true));
  return std::move(logits.front());
}

Result<std::vector<std::vector<float>>> cpu_forward_batch(const ModelShape& s, const CpuModelWeights& w,
                                                          DeviceKvPool& l1, std::span<const CpuSequence> batch) {
  return forward_batch(s, w, l1, batch, nullptr, true);
}

Result<std::vector<std::vector<float>>> cpu_forward_rank(const ModelShape& s, const CpuModelWeights& w,
                                                         DeviceKvPool& l1, std::span<const CpuSequence> batch,
                                                         const RankAllReduce& all_reduce, bool want_logits) {
  return forward_batch(s, w, l1, batch, all_reduce, want_logits);
}

}  // namespace hiq
