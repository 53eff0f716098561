#include "model/tensor_parallel.h"

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "codec/numeric.h"

namespace hiq {
namespace {

size_t element_bytes(cpu::WeightType type) { return type == cpu::WeightType::kF32 ? 4 : 2; }

// Rows [begin, begin + count) of `m`: a view.
cpu::MatrixView row_range(const cpu::MatrixView& m, int64_t begin, int64_t count) {
  cpu::MatrixView v = m;
  v.data = static_cast<const std::byte*>(m.data) + begin * m.cols * static_cast<int64_t>(element_bytes(m.type));
  v.rows = count;
  return v;
}

// Elements [begin, begin + count) of `v` (absent stays absent).
cpu::VectorView element_range(const cpu::VectorView& v, int64_t begin, int64_t count) {
  if (v.data == nullptr) return v;
  cpu::VectorView r = v;
  r.data = static_cast<const std::byte*>(v.data) + begin * static_cast<int64_t>(element_bytes(v.type));
  r.size = count;
  return r;
}

// Columns [begin, begin + count) of `m`, copied into `storage` (a row-parallel shard).
cpu::MatrixView column_range(const cpu::MatrixView& m, int64_t begin, int64_t count, std::vector<std::byte>& storage) {
  const size_t element = element_bytes(m.type);
  storage.resize(static_cast<size_t>(m.rows * count) * element);
  for (int64_t r = 0; r < m.rows; ++r)
    std::memcpy(storage.data() + static_cast<size_t>(r * count) * element,
                static_cast<const std::byte*>(m.data) + static_cast<size_t>(r * m.cols + begin) * element,
                static_cast<size_t>(count) * element);
  return {m.type, storage.data(), m.rows, count};
}

void store(std::vector<float>& x) { cpu::round_to_bf16(x.data(), x.size()); }

}  // namespace

Result<TpShard> tp_shard(const ModelShape& s, int rank, int size) {
  if (size < 1) return invalid_argument("tensor parallelism: the size must be at least 1, not " + std::to_string(size));
  if (rank < 0 || rank >= size)
    return invalid_argument("tensor parallelism: rank " + std::to_string(rank) + " is outside 0 … " +
                            std::to_string(size - 1));
  const std::string n = std::to_string(size);
  if (s.num_heads % size != 0)
    return invalid_argument("tensor parallelism: " + n + " ranks do not divide the " + std::to_string(s.num_heads) +
                            " query heads");
  if (s.num_kv_heads % size != 0 && size % s.num_kv_heads != 0)
    return invalid_argument("tensor parallelism: " + n + " ranks neither divide the " +
                            std::to_string(s.num_kv_heads) + " KV heads nor are a multiple of them");
  if (s.intermediate_size % size != 0)
    return invalid_argument("tensor parallelism: " + n + " ranks do not divide the MLP's " +
                            std::to_string(s.intermediate_size) + " columns");
  TpShard t;
  t.rank = rank;
  t.size = size;
  t.q_heads = s.num_heads / size;
  t.q_head_begin = rank * t.q_heads;
  // The KV heads this rank's query heads read: a contiguous run of them when
  // the KV heads split, else the one (replicated) head of its group.
  const int group = s.num_heads / s.num_kv_heads;
  t.kv_heads = std::max(1, s.num_kv_heads / size);
  t.kv_head_begin = t.q_head_begin / group;
  t.mlp_columns = s.intermediate_size / size;
  t.mlp_begin = rank * t.mlp_columns;
  return t;
}

ModelShape rank_shape(const ModelShape& shape, const TpShard& shard) {
  ModelShape s = shape;
  s.num_heads = shard.q_heads;
  s.num_kv_heads = shard.kv_heads;
  s.intermediate_size = static_cast<int>(shard.mlp_columns);
  return s;
}

Result<std::unique_ptr<CpuTpModel>> CpuTpModel::create(const ModelShape& shape, const CpuModelWeights& weights,
                                                       int size) {
  HIQ_RETURN_IF_ERROR(check_weights(shape, weights));
  std::unique_ptr<CpuTpModel> model(new CpuTpModel);
  model->shape_ = shape;
  model->ranks_.resize(static_cast<size_t>(size > 0 ? size : 0));
  const int64_t d = shape.head_dim;
  for (int r = 0; r < size; ++r) {
    Rank& rank = model->ranks_[static_cast<size_t>(r)];
    HIQ_ASSIGN_OR_RETURN(rank.shard, tp_shard(shape, r, size));
    const TpShard& t = rank.shard;
    rank.shape = rank_shape(shape, t);
    rank.weights = weights;
    rank.column_shards.reserve(2 * weights.layers.size());
    for (LayerWeights& l : rank.weights.layers) {
      const int64_t q0 = t.q_head_begin * d, qn = t.q_heads * d, kv0 = t.kv_head_begin * d, kvn = t.kv_heads * d;
      l.q_proj = row_range(l.q_proj, q0, qn);
      l.q_bias = element_range(l.q_bias, q0, qn);
      l.k_proj = row_range(l.k_proj, kv0, kvn);
      l.k_bias = element_range(l.k_bias, kv0, kvn);
      l.v_proj = row_range(l.v_proj, kv0, kvn);
      l.v_bias = element_range(l.v_bias, kv0, kvn);
      l.o_proj = column_range(l.o_proj, q0, qn, rank.column_shards.emplace_back());
      l.gate_proj = row_range(l.gate_proj, t.mlp_begin, t.mlp_columns);
      l.up_proj = row_range(l.up_proj, t.mlp_begin, t.mlp_columns);
      l.down_proj = column_range(l.down_proj, t.mlp_begin, t.mlp_columns, rank.column_shards.emplace_back());
    }
  }
  return model;
}

// The ranks' meeting point: each posts a copy of its partial sum, all wait,
// each adds the partials in rank order, all wait again before a partial is
// overwritten. A rank that fails drops out of the barrier, so the others never
// wait for it, and they stop at their next meeting.
struct CpuTpModel::AllReduce {
  explicit AllReduce(int ranks) : partials(static_cast<size_t>(ranks)), barrier(ranks) {}

  // sum = Σ_r partials[r] (+ bias), rounded to BF16 once. False: a rank failed.
  bool run(int rank, const std::vector<float>& partial, const cpu::VectorView& bias, std::vector<float>& sum) {
    partials[static_cast<size_t>(rank)] = partial;
    barrier.arrive_and_wait();
    if (failed.load()) return false;
    std::fill(sum.begin(), sum.end(), 0.f);
    for (const std::vector<float>& p : partials)
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += p[i];
    if (bias.data != nullptr) {
      std::vector<float> b(static_cast<size_t>(bias.size));
      cpu::read_row({bias.type, bias.data, 1, bias.size}, 0, b.data());
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += b[i % b.size()];
    }
    store(sum);
    barrier.arrive_and_wait();
    return true;
  }
  // Records the first error and leaves the meetings for good.
  void fail(Status status) {
    {
      std::lock_guard lock(mutex);
      if (first_error.is_ok()) first_error = std::move(status);
    }
    failed.store(true);
    barrier.arrive_and_drop();
  }

  std::vector<std::vector<float>> partials;
  std::barrier<> barrier;
  std::atomic<bool> failed{false};
  std::mutex mutex;
  Status first_error;
};

Status CpuTpModel::run_rank(int r, DeviceKvPool& pool, std::span<const int32_t> tokens, std::span<const SlotId> slots,
                            size_t first_new, bool all_logits, AllReduce& reduce, std::vector<float>* logits) const {
  const Rank& rank = ranks_[static_cast<size_t>(r)];
  const ModelShape& s = rank.shape;
  const CpuModelWeights& w = rank.weights;
  const size_t n = tokens.size();
  const auto n_new = static_cast<int64_t>(n - first_new);
  const int64_t hidden = s.hidden_size, q_out = int64_t{s.num_heads} * s.head_dim,
                kv_out = int64_t{s.num_kv_heads} * s.head_dim, mlp = s.intermediate_size;
  const std::span<const SlotId> new_slots = slots.subspan(first_new);
  const cpu::VectorView no_bias;

  std::vector<float> h(static_cast<size_t>(n_new * hidden));
  for (int64_t t = 0; t < n_new; ++t)
    cpu::read_row(w.embed_tokens, tokens[first_new + static_cast<size_t>(t)], h.data() + t * hidden);
  std::vector<float> x(h.size()), q(static_cast<size_t>(n_new * q_out)), k(static_cast<size_t>(n_new * kv_out)),
      v(k.size()), attn(q.size()), partial(h.size()), o(h.size()), gate(static_cast<size_t>(n_new * mlp)),
      up(gate.size());
  std::vector<uint16_t> rows(static_cast<size_t>(std::max<int64_t>(n_new, static_cast<int64_t>(n)) * kv_out));
  std::vector<float> keys(static_cast<size_t>(static_cast<int64_t>(n) * kv_out)), values(keys.size());
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));

  for (int layer = 0; layer < s.num_layers; ++layer) {
    const LayerWeights& l = w.layers[static_cast<size_t>(layer)];
    const LayerWeights& whole = ranks_.front().weights.layers[static_cast<size_t>(layer)];
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

    for (int p = 0; p < 2; ++p) {
      const std::vector<float>& src = p == 0 ? k : v;
      for (size_t i = 0; i < src.size(); ++i) rows[i] = numeric::float_to_bf16(src[i]);
      HIQ_RETURN_IF_ERROR(pool.write_rows(layer, static_cast<KvPart>(p), new_slots, rows.data()));
    }
    for (int p = 0; p < 2; ++p) {
      HIQ_RETURN_IF_ERROR(pool.read_rows(layer, static_cast<KvPart>(p), slots, rows.data()));
      std::vector<float>& dst = p == 0 ? keys : values;
      for (size_t i = 0; i < dst.size(); ++i) dst[i] = numeric::bf16_to_float(rows[i]);
    }
    cpu::attention(q.data(), n_new, keys.data(), values.data(), static_cast<int64_t>(n), s.num_heads, s.num_kv_heads,
                   s.head_dim, static_cast<int64_t>(first_new), scale, attn.data());
    store(attn);
    cpu::matmul(attn.data(), n_new, l.o_proj, no_bias, partial.data());
    store(partial);
    // The output bias is added once, to the sum.
    if (!reduce.run(r, partial, whole.o_bias, o)) return failed_precondition("another rank failed");
    for (size_t i = 0; i < h.size(); ++i) h[i] += o[i];
    store(h);

    cpu::rms_norm(h.data(), n_new, hidden, l.post_attention_norm, s.rms_norm_eps, x.data(), true);
    store(x);
    cpu::matmul(x.data(), n_new, l.gate_proj, no_bias, gate.data());
    cpu::matmul(x.data(), n_new, l.up_proj, no_bias, up.data());
    store(gate), store(up);
    cpu::silu_mul(gate.data(), up.data(), gate.size(), gate.data());
    store(gate);
    cpu::matmul(gate.data(), n_new, l.down_proj, no_bias, partial.data());
    store(partial);
    if (!reduce.run(r, partial, no_bias, o)) return failed_precondition("another rank failed");
    for (size_t i = 0; i < h.size(); ++i) h[i] += o[i];
    store(h);
  }
  if (logits == nullptr) return Status::ok();  // every rank holds the same h: rank 0 computes the logits
  const int64_t first_out = all_logits ? 0 : n_new - 1, outputs = n_new - first_out;
  cpu::rms_norm(h.data() + first_out * hidden, outputs, hidden, w.final_norm, s.rms_norm_eps, x.data(), true);
  std::vector<float> normed(x.begin(), x.begin() + outputs * hidden);
  store(normed);
  logits->resize(static_cast<size_t>(outputs * s.vocab_size));
  cpu::matmul(normed.data(), outputs, w.lm_head, no_bias, logits->data());
  return Status::ok();
}

Result<std::vector<float>> CpuTpModel::forward(std::span<DeviceKvPool* const> pools, std::span<const int32_t> tokens,
                                               std::span<const SlotId> slots, size_t first_new,
                                               bool all_logits) const {
  if (pools.size() != ranks_.size())
    return invalid_argument("tensor parallelism: " + std::to_string(pools.size()) + " L1 pools for " +
                            std::to_string(ranks_.size()) + " ranks");
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (pools[r] == nullptr) return invalid_argument("tensor parallelism: rank " + std::to_string(r) + " has no pool");
    const Status checked = check_sequence(ranks_[r].shape, *pools[r], tokens, slots, first_new);
    if (!checked.is_ok())
      return Status(checked.code(), "rank " + std::to_string(r) + ": " + checked.message());
  }
  AllReduce reduce(size());
  std::vector<float> logits;
  {
    std::vector<std::jthread> threads;
    for (int r = 1; r < size(); ++r)
      threads.emplace_back([&, r] {
        const Status status = run_rank(r, *pools[static_cast<size_t>(r)], tokens, slots, first_new, all_logits,
                                       reduce, nullptr);
        if (!status.is_ok()) reduce.fail(status);
      });
    const Status status = run_rank(0, *pools[0], tokens, slots, first_new, all_logits, reduce, &logits);
    if (!status.is_ok()) reduce.fail(status);
  }  // joins the other ranks
  if (!reduce.first_error.is_ok()) return reduce.first_error;
  return logits;
}

}  // namespace hiq
