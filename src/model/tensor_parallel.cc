#include "model/tensor_parallel.h"

#include <cstring>
#include <string>
#include <thread>

#include "model/tp_rendezvous.h"

namespace hiq {
namespace {

// Rows [begin, begin + count) of `m`: a view.
cpu::MatrixView row_range(const cpu::MatrixView& m, int64_t begin, int64_t count) {
  cpu::MatrixView v = m;
  v.data = static_cast<const std::byte*>(m.data) + begin * m.cols * static_cast<int64_t>(cpu::weight_element_bytes(m.type));
  v.rows = count;
  return v;
}

// Elements [begin, begin + count) of `v` (absent stays absent).
cpu::VectorView element_range(const cpu::VectorView& v, int64_t begin, int64_t count) {
  if (v.data == nullptr) return v;
  cpu::VectorView r = v;
  r.data = static_cast<const std::byte*>(v.data) + begin * static_cast<int64_t>(cpu::weight_element_bytes(v.type));
  r.size = count;
  return r;
}

// Columns [begin, begin + count) of `m`, copied into `storage` (a row-parallel shard).
cpu::MatrixView column_range(const cpu::MatrixView& m, int64_t begin, int64_t count, std::vector<std::byte>& storage) {
  const size_t element = cpu::weight_element_bytes(m.type);
  storage.resize(static_cast<size_t>(m.rows * count) * element);
  for (int64_t r = 0; r < m.rows; ++r)
    std::memcpy(storage.data() + static_cast<size_t>(r * count) * element,
                static_cast<const std::byte*>(m.data) + static_cast<size_t>(r * m.cols + begin) * element,
                static_cast<size_t>(count) * element);
  return {m.type, storage.data(), m.rows, count};
}

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

// The ranks' meeting point: each posts a copy of its partial sum, all meet,
// each adds the partials in rank order, all meet again before a partial is
// overwritten. A rank that fails leaves (TpRendezvous), and the others stop
// at their next meeting.
struct CpuTpModel::AllReduce {
  explicit AllReduce(int ranks) : partials(static_cast<size_t>(ranks)), meeting(ranks) {}

  // sum = Σ_r partials[r] (+ bias), rounded to BF16 once. False: a rank failed.
  bool run(int rank, const std::vector<float>& partial, const cpu::VectorView& bias, std::vector<float>& sum) {
    partials[static_cast<size_t>(rank)] = partial;
    if (!meeting.meet()) return false;
    std::fill(sum.begin(), sum.end(), 0.f);
    for (const std::vector<float>& p : partials)
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += p[i];
    if (bias.data != nullptr) {
      std::vector<float> b(static_cast<size_t>(bias.size));
      cpu::read_row({bias.type, bias.data, 1, bias.size}, 0, b.data());
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += b[i % b.size()];
    }
    cpu::round_to_bf16(sum.data(), sum.size());
    (void)meeting.meet();  // no partial is overwritten before every rank has read it
    return true;
  }

  std::vector<std::vector<float>> partials;
  TpRendezvous meeting;
};

Status CpuTpModel::run_rank(int r, DeviceKvPool& pool, std::span<const CpuSequence> batch, AllReduce& reduce,
                            std::vector<std::vector<float>>* logits) const {
  const Rank& rank = ranks_[static_cast<size_t>(r)];
  std::vector<float> sum;
  const RankAllReduce all_reduce = [&](std::vector<float>& partial, const cpu::VectorView& bias) {
    sum.resize(partial.size());
    if (!reduce.run(r, partial, bias, sum)) return failed_precondition("another rank failed");
    partial.swap(sum);
    return Status::ok();
  };
  HIQ_ASSIGN_OR_RETURN(std::vector<std::vector<float>> out,
                       cpu_forward_rank(rank.shape, rank.weights, pool, batch, all_reduce, logits != nullptr));
  if (logits != nullptr) *logits = std::move(out);
  return Status::ok();
}

Result<std::vector<float>> CpuTpModel::forward(std::span<DeviceKvPool* const> pools, std::span<const int32_t> tokens,
                                               std::span<const SlotId> slots, size_t first_new, bool all_logits,
                                               const BeforeAttention& before_attention) const {
  const CpuSequence one{tokens, slots, first_new, all_logits, before_attention};
  HIQ_ASSIGN_OR_RETURN(std::vector<std::vector<float>> logits, forward_batch(pools, std::span(&one, 1)));
  return std::move(logits.front());
}

Result<std::vector<std::vector<float>>> CpuTpModel::forward_batch(std::span<DeviceKvPool* const> pools,
                                                                  std::span<const CpuSequence> batch) const {
  if (pools.size() != ranks_.size())
    return invalid_argument("tensor parallelism: " + std::to_string(pools.size()) + " L1 pools for " +
                            std::to_string(ranks_.size()) + " ranks");
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (pools[r] == nullptr) return invalid_argument("tensor parallelism: rank " + std::to_string(r) + " has no pool");
    for (const CpuSequence& seq : batch) {
      const Status checked = check_sequence(ranks_[r].shape, *pools[r], seq.tokens, seq.slots, seq.first_new);
      if (!checked.is_ok())
        return Status(checked.code(), "rank " + std::to_string(r) + ": " + checked.message());
    }
  }
  AllReduce reduce(size());
  std::vector<std::vector<float>> logits;
  run_rank_threads(reduce.meeting, size(), [&](int r) {
    const Status status = run_rank(r, *pools[static_cast<size_t>(r)], batch, reduce, r == 0 ? &logits : nullptr);
    if (!status.is_ok()) reduce.meeting.leave(status);
  });
  HIQ_RETURN_IF_ERROR(reduce.meeting.first_error());
  return logits;
}

}  // namespace hiq
