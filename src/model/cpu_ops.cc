#include "model/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "codec/numeric.h"
#include "core/check.h"
#include "core/parallel.h"
#include "model/cpu_kernels.h"

namespace hiq::cpu {
namespace {

// Element i of a weight array, widened to float.
float load(WeightType type, const void* data, int64_t i) {
  switch (type) {
    case WeightType::kBf16: return numeric::bf16_to_float(static_cast<const uint16_t*>(data)[i]);
    case WeightType::kF16: return numeric::f16_to_float(static_cast<const uint16_t*>(data)[i]);
    case WeightType::kF32: return static_cast<const float*>(data)[i];
  }
  return 0.0f;
}

// Multiply-adds a thread's share of a loop should have at least, so that
// handing it to a worker (who is watching for work: core/parallel.h) costs
// little beside it. 2^15 is about 2 µs of the vector kernels; a decode step
// of the small model on two cores took 0.58–0.64 ms at 2^14–2^16 against
// 0.81 at 2^18, prefills the same (docs/benchmarks.md).
constexpr int64_t kParallelWork = int64_t{1} << 15;
// Elements a thread's share of an elementwise loop should have at least.
constexpr int64_t kParallelElements = int64_t{1} << 15;

}  // namespace

void read_row(const MatrixView& w, int64_t row, float* out) {
  HIQ_CHECK(row >= 0 && row < w.rows);
  for (int64_t i = 0; i < w.cols; ++i) out[i] = load(w.type, w.data, row * w.cols + i);
}

void matmul(const float* x, int64_t m, const MatrixView& w, const VectorView& bias, float* y) {
  const Product product{w, bias, y};
  matmuls(x, m, std::span(&product, 1));
}

Products::Products(const float* x, int64_t m, std::span<const Product> products)
    : x_(x), m_(m), products_(products), biases_(products.size()), first_row_(products.size() + 1, 0) {
  HIQ_CHECK(m >= 0 && !products.empty());
  const int64_t cols = products.front().w.cols;
  for (size_t i = 0; i < products.size(); ++i) {
    const Product& p = products[i];
    HIQ_CHECK(p.w.data != nullptr && p.w.rows > 0 && p.w.cols == cols && cols > 0 && p.y != nullptr);
    HIQ_CHECK(p.bias.data == nullptr || p.bias.size == p.w.rows);
    if (p.bias.data != nullptr) {
      biases_[i].resize(static_cast<size_t>(p.w.rows));
      for (int64_t j = 0; j < p.w.rows; ++j) biases_[i][static_cast<size_t>(j)] = load(p.bias.type, p.bias.data, j);
    }
    first_row_[i + 1] = first_row_[i] + p.w.rows;
  }
}

// Each output row is computed the same way whichever call computes it
// (cpu_kernels.h), so the result does not depend on how rows are split.
void Products::run(int64_t first, int64_t last) const {
  HIQ_CHECK(first >= 0 && first <= last && last <= rows());
  if (m_ == 0) return;
  const kernels::Table& k = kernels::best_table();
  for (size_t i = 0; i < products_.size(); ++i) {
    const int64_t begin = std::max(first, first_row_[i]), end = std::min(last, first_row_[i + 1]);
    if (begin >= end) continue;
    const Product& p = products_[i];
    k.matmul_rows(x_, m_, p.w, begin - first_row_[i], end - first_row_[i],
                  biases_[i].empty() ? nullptr : biases_[i].data(), p.y);
  }
}

void matmuls(const float* x, int64_t m, std::span<const Product> products) {
  const Products all(x, m, products);
  if (m == 0) return;
  parallel_for(all.rows(), kParallelWork / (products.front().w.cols * m) + 1,
               [&](int64_t first, int64_t last) { all.run(first, last); });
}

void rms_norm(const float* x, int64_t m, int64_t n, const VectorView& weight, float eps, float* y,
              bool bf16_normalized) {
  HIQ_CHECK(weight.data != nullptr && weight.size == n);
  parallel_for(m, kParallelElements / n + 1, [&](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) {
      const float* xt = x + t * n;
      float* yt = y + t * n;
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(xt[i]) * xt[i];
      const float inv = 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(n)) + eps);
      for (int64_t i = 0; i < n; ++i) {
        float normalized = xt[i] * inv;
        if (bf16_normalized) normalized = numeric::bf16_to_float(numeric::float_to_bf16(normalized));
        yt[i] = normalized * load(weight.type, weight.data, i);
      }
    }
  });
}

void silu_mul(const float* gate, const float* up, size_t n, float* out) {
  parallel_for(static_cast<int64_t>(n), kParallelElements, [&](int64_t first, int64_t last) {
    for (auto i = static_cast<size_t>(first); i < static_cast<size_t>(last); ++i) {
      const float g = gate[i];
      out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
  });
}

void add_into(float* x, const float* y, size_t n) {
  parallel_for(static_cast<int64_t>(n), kParallelElements, [&](int64_t first, int64_t last) {
    for (auto i = static_cast<size_t>(first); i < static_cast<size_t>(last); ++i) x[i] += y[i];
  });
}

void apply_rope_rows(float* q, float* k, int64_t tokens, const int64_t* positions, int heads, int kv_heads,
                     int head_dim, const RopeTable& table) {
  const int64_t q_row = int64_t{heads} * head_dim, k_row = int64_t{kv_heads} * head_dim;
  // A row's rotation costs a sine and a cosine per frequency: a few rows a range.
  parallel_for(tokens, kParallelElements / (8 * (q_row + k_row)) + 1, [&](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) {
      apply_rope(q + t * q_row, heads, head_dim, positions[t], table);
      apply_rope(k + t * k_row, kv_heads, head_dim, positions[t], table);
    }
  });
}

void apply_rope(float* x, int heads, int head_dim, int64_t position, const RopeTable& table) {
  const auto half = static_cast<size_t>(head_dim / 2);
  HIQ_CHECK(table.inv_freq.size() == half);
  std::vector<float> cos_t(half), sin_t(half);
  rope_angles(position, table, cos_t.data(), sin_t.data());
  rotate_half(x, heads, head_dim, cos_t.data(), sin_t.data());
}

void rope_angles(int64_t position, const RopeTable& table, float* cos, float* sin) {
  const auto half = table.inv_freq.size();
  for (size_t i = 0; i < half; ++i) {
    // θ in float, as the reference computes position · inv_freq.
    const float theta = static_cast<float>(position) * table.inv_freq[i];
    cos[i] = std::cos(theta) * table.attention_scale;
    sin[i] = std::sin(theta) * table.attention_scale;
  }
}

void rotate_half(float* x, int heads, int head_dim, const float* cos, const float* sin) {
  const int half = head_dim / 2;
  for (int h = 0; h < heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half], c = cos[i], s = sin[i];
      v[i] = a * c - b * s;
      v[i + half] = b * c + a * s;
    }
  }
}

namespace {

// One block of a row's keys (cpu_ops.h): its max and sum, and o_b in `o`.
using KeyBlock = AttentionPartials::Block;

// The attention of one (query, head) row over keys [begin, end): e in
// `scores` (end − begin floats), o_b in `o` (head_dim floats).
KeyBlock attend_block(const kernels::Table& kern, const float* q, const kernels::Bf16Rows& k,
                      const kernels::Bf16Rows& v, int head_dim, int64_t begin, int64_t end, float scale,
                      float* scores, float* o) {
  const int64_t n = end - begin;
  kern.dots(q, k, begin, n, head_dim, scores);
  KeyBlock b;
  b.max = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    scores[j] *= scale;
    b.max = std::max(b.max, scores[j]);
  }
  for (int64_t j = 0; j < n; ++j) {
    scores[j] = std::exp(scores[j] - b.max);
    b.sum += scores[j];
  }
  kern.weighted_sum(scores, v, begin, n, head_dim, o);
  return b;
}

// Merges block b (after the first) into a row's running state (cpu_ops.h).
void merge_block(KeyBlock& state, float* out, const KeyBlock& b, const float* o, int head_dim) {
  const float merged = std::max(state.max, b.max);
  const float alpha = std::exp(state.max - merged), beta = std::exp(b.max - merged);
  state.max = merged;
  state.sum = state.sum * alpha + b.sum * beta;
  for (int d = 0; d < head_dim; ++d) out[d] = out[d] * alpha + o[d] * beta;
}

// A row's output over `visible` keys from its blocks in order (cpu_ops.h):
// block(b) gives block b's (max, sum) and its o_b, which stays valid until
// the next call.
template <class BlockFn>
void merge_row(float* out, int64_t visible, int head_dim, BlockFn&& block) {
  auto [state, o] = block(0);
  std::copy_n(o, head_dim, out);
  for (int64_t b = 1; b * kAttentionKeyBlock < visible; ++b) {
    const auto [next, o_b] = block(b);
    merge_block(state, out, next, o_b, head_dim);
  }
  for (int d = 0; d < head_dim; ++d) out[d] /= state.sum;
}

}  // namespace

void attention(const float* q, int64_t n_q, const uint16_t* k, const uint16_t* v, int64_t n_kv, int heads,
               int kv_heads, int head_dim, int64_t first_position, float scale, float* out) {
  const AttentionSequence one{q, n_q, k, v, nullptr, n_kv, first_position, out};
  attention(std::span(&one, 1), heads, kv_heads, head_dim, scale);
}

void attention(std::span<const AttentionSequence> sequences, int heads, int kv_heads, int head_dim, float scale,
               Team* team, AttentionPartials* partials) {
  HIQ_CHECK(heads > 0 && kv_heads > 0 && heads % kv_heads == 0);
  HIQ_CHECK(team == nullptr || partials != nullptr);
  // A loop on the pool, or in chunks across the team, then its barrier.
  const auto for_ranges = [team](int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (team == nullptr) return parallel_for(n, grain, fn);
    team->for_chunks(n, 1, fn);
  };
  const int threads = team != nullptr ? team->size() : parallel_threads();
  const int group = heads / kv_heads;
  const int64_t stride = int64_t{kv_heads} * head_dim;  // elements from one token's row to the next
  // Rows (query, head) of every sequence, numbered across the batch:
  // sequence i's start at first_row[i].
  std::vector<int64_t> first_row(sequences.size() + 1, 0);
  int64_t most_blocks = 1;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const AttentionSequence& seq = sequences[i];
    HIQ_CHECK(seq.n_q >= 0 && seq.n_kv >= seq.first_position + seq.n_q);
    first_row[i + 1] = first_row[i] + seq.n_q * heads;
    most_blocks = std::max(most_blocks, (seq.first_position + seq.n_q + kAttentionKeyBlock - 1) / kAttentionKeyBlock);
  }
  const int64_t rows = first_row.back();
  if (rows == 0) {
    if (team != nullptr) team->barrier();
    return;
  }
  const kernels::Table& kern = kernels::best_table();
  // Row r: its q, K and V, its visible keys (causal: positions ≤ the query's), its output.
  struct Row {
    const float* q;
    kernels::Bf16Rows k, v;
    int64_t visible;
    float* out;
  };
  const auto row_of = [&](int64_t r) {
    const auto i = static_cast<size_t>(std::upper_bound(first_row.begin(), first_row.end(), r) - first_row.begin() - 1);
    const AttentionSequence& seq = sequences[i];
    const int64_t t = (r - first_row[i]) / heads;
    const auto h = static_cast<int>((r - first_row[i]) % heads);
    const int64_t kv_offset = int64_t{h / group} * head_dim;
    return Row{seq.q + (t * heads + h) * head_dim, kernels::Bf16Rows{seq.k + kv_offset, seq.slots, stride},
               kernels::Bf16Rows{seq.v + kv_offset, seq.slots, stride}, seq.first_position + t + 1,
               seq.out + (t * heads + h) * head_dim};
  };
  const auto block_end = [&](const Row& row, int64_t b) { return std::min(row.visible, (b + 1) * kAttentionKeyBlock); };
  const int64_t block_work = kAttentionKeyBlock * head_dim * 2;  // multiply-adds of a whole block

  if (rows >= 2 * int64_t{threads} || most_blocks == 1) {
    // Rows split across threads, each row's blocks run in order by one. The
    // ranges go out last row first: a causal row sees more keys the later its
    // token, so within a sequence the longest work is taken first and the
    // last ranges to be taken are short, leaving no thread alone with a long
    // one at the end. (Across a batch, the last sequence's rows go first,
    // whatever its length.)
    for_ranges(rows, kParallelWork / (most_blocks * block_work) + 1, [&](int64_t first, int64_t last) {
      std::vector<float> scores(static_cast<size_t>(kAttentionKeyBlock)), o(static_cast<size_t>(head_dim));
      for (int64_t i = first; i < last; ++i) {
        const Row row = row_of(rows - 1 - i);
        merge_row(row.out, row.visible, head_dim, [&](int64_t b) {
          const KeyBlock block = attend_block(kern, row.q, row.k, row.v, head_dim, b * kAttentionKeyBlock,
                                              block_end(row, b), scale, scores.data(), o.data());
          return std::pair<KeyBlock, const float*>(block, o.data());
        });
      }
    });
    return;
  }
  // A few long rows (a decode step's): their blocks side by side, then each
  // row's merged in order.
  const int64_t items = rows * most_blocks;
  AttentionPartials local;
  AttentionPartials& shared = team != nullptr ? *partials : local;
  if (team == nullptr || team->rank() == 0) {
    shared.blocks.resize(static_cast<size_t>(items));
    shared.outputs.resize(static_cast<size_t>(items * head_dim));
  }
  if (team != nullptr) team->barrier();
  std::vector<KeyBlock>& blocks = shared.blocks;
  std::vector<float>& partial = shared.outputs;
  for_ranges(items, kParallelWork / block_work + 1, [&](int64_t first, int64_t last) {
    std::vector<float> scores(static_cast<size_t>(kAttentionKeyBlock));
    for (int64_t i = first; i < last; ++i) {
      const Row row = row_of(i / most_blocks);
      const int64_t b = i % most_blocks;
      if (b * kAttentionKeyBlock >= row.visible) continue;  // past this row's keys
      blocks[static_cast<size_t>(i)] = attend_block(kern, row.q, row.k, row.v, head_dim, b * kAttentionKeyBlock,
                                                    block_end(row, b), scale, scores.data(),
                                                    partial.data() + i * head_dim);
    }
  });
  for_ranges(rows, kParallelWork / (most_blocks * head_dim * 4) + 1, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      const Row row = row_of(r);
      merge_row(row.out, row.visible, head_dim, [&](int64_t b) {
        const int64_t i = r * most_blocks + b;
        return std::pair<KeyBlock, const float*>(blocks[static_cast<size_t>(i)], partial.data() + i * head_dim);
      });
    }
  });
}

void round_to_bf16(float* x, size_t n) {
  parallel_for(static_cast<int64_t>(n), kParallelElements, [&](int64_t first, int64_t last) {
    for (auto i = static_cast<size_t>(first); i < static_cast<size_t>(last); ++i)
      x[i] = numeric::bf16_to_float(numeric::float_to_bf16(x[i]));
  });
}

}  // namespace hiq::cpu
