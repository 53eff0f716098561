// model/cpu_ops.h — the operations of a Qwen3-family forward pass on the CPU.
//
// FP32 math, BF16 storage: every operation computes in float and the forward
// pass rounds each result to BF16 where the model stores a tensor (as the
// reference, transformers in bf16, does), so the CPU backend follows the same
// rounding steps. Weights are read in the checkpoint's own dtype (BF16, F16 or
// F32) and widened on the fly; nothing is converted at load.
//
// Shapes: activations are row-major [tokens][features]; a weight matrix is
// [out features][in features], as torch.nn.Linear stores it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "model/rope.h"

namespace hiq {
class Team;
}

namespace hiq::cpu {

enum class WeightType : uint8_t { kBf16, kF16, kF32 };

// Bytes of one element of a weight of this type.
constexpr size_t weight_element_bytes(WeightType type) { return type == WeightType::kF32 ? 4 : 2; }

struct MatrixView {
  WeightType type = WeightType::kBf16;
  const void* data = nullptr;  // [rows][cols]
  int64_t rows = 0, cols = 0;  // out features, in features
};

struct VectorView {
  WeightType type = WeightType::kBf16;
  const void* data = nullptr;  // [size]; null: absent (no bias)
  int64_t size = 0;
};

// Row `row` of `w`, widened to float (an embedding lookup).
void read_row(const MatrixView& w, int64_t row, float* out);

// y[m][rows] = x[m][cols] · wᵀ (+ bias[rows]).
void matmul(const float* x, int64_t m, const MatrixView& w, const VectorView& bias, float* y);

// Several products of one x (q, k and v; gate and up), each as matmul()
// computes it, in one parallel loop over their output features together:
// the same bits, and one hand-off to the pool's threads instead of one a
// matrix, which at a decode step's sizes costs about as much as a product.
// Every w has the same cols.
struct Product {
  MatrixView w;
  VectorView bias;
  float* y = nullptr;  // [m][w.rows]
};
void matmuls(const float* x, int64_t m, std::span<const Product> products);
// Products of one x prepared to compute any of their output rows on the
// calling thread (a team rank's chunks), each row the bits matmuls gives it.
// Rows are numbered one product after another; each bias is widened to float
// once, here. x, the weights and the outputs must outlive it.
class Products {
 public:
  Products(const float* x, int64_t m, std::span<const Product> products);
  int64_t rows() const { return first_row_.back(); }
  void run(int64_t first, int64_t last) const;

 private:
  const float* x_;
  int64_t m_;
  std::span<const Product> products_;
  std::vector<std::vector<float>> biases_;
  std::vector<int64_t> first_row_;  // where each product's rows start; then the total
};

// y[i] = x̂[i] · weight with x̂[i] = x[i] / sqrt(mean(x[i]²) + eps), per row of
// n features; y may be x. `bf16_normalized`: x̂ is rounded to BF16 before the
// weight multiplies it, as the reference's RMSNorm casts it back to the
// activations' dtype first.
void rms_norm(const float* x, int64_t m, int64_t n, const VectorView& weight, float eps, float* y,
              bool bf16_normalized = false);

// out = silu(gate) · up, elementwise; out may alias either input.
void silu_mul(const float* gate, const float* up, size_t n, float* out);

// x[i] += y[i], elementwise (the residual stream taking a layer's output).
void add_into(float* x, const float* y, size_t n);

// Rotates `heads` vectors of head_dim at `position` in place, the "rotate
// half" convention of Qwen/Llama checkpoints: for i < d/2, with
// θ = position · inv_freq[i] and s = table.attention_scale,
//   x'[i] = x[i]·cos θ·s − x[i + d/2]·sin θ·s,  x'[i + d/2] = x[i + d/2]·cos θ·s + x[i]·sin θ·s.
void apply_rope(float* x, int heads, int head_dim, int64_t position, const RopeTable& table);
// apply_rope in two halves, for a position's many rotations: cos θ·s and
// sin θ·s of each i < d/2 (head_dim / 2 floats each), then the rotation of
// `heads` vectors by them.
void rope_angles(int64_t position, const RopeTable& table, float* cos, float* sin);
void rotate_half(float* x, int heads, int head_dim, const float* cos, const float* sin);

// apply_rope to q and k of `tokens` rows ([tokens][heads·head_dim] and
// [tokens][kv_heads·head_dim]), row t at positions[t], the rows shared out
// across threads.
void apply_rope_rows(float* q, float* k, int64_t tokens, const int64_t* positions, int heads, int kv_heads,
                     int head_dim, const RopeTable& table);

// Causal grouped-query attention. q: [n_q][heads][head_dim] at positions
// first_position … first_position + n_q − 1; k, v: BF16 rows (as L1 holds
// them) [n_kv][kv_heads][head_dim] at positions 0 … n_kv − 1 (n_kv ≥
// first_position + n_q). Query head h reads KV head h / (heads / kv_heads).
// out: [n_q][heads][head_dim].
//
// A row's keys are taken in blocks of kAttentionKeyBlock, and the blocks'
// softmaxes merged in order (FlashAttention's), with the same operations
// whether one thread runs every block of a row — a prefill — or the blocks of
// a decode step's few rows run side by side: a token's output is the same
// bits either way, and on any number of threads. Each block b of keys j:
//   s_j = dot(q, k_j) · scale,  m_b = max s_j,  e_j = exp(s_j − m_b),
//   l_b = Σ e_j (in order),  o_b = weighted_sum(e, v)  (cpu_kernels.h);
// the row's state starts as block 0's (M, L, O) = (m_0, l_0, o_0) and takes
// each next block as M' = max(M, m_b), α = exp(M − M'), β = exp(m_b − M'),
// L = L·α + l_b·β, O = O·α + o_b·β; the output is O / L.
inline constexpr int64_t kAttentionKeyBlock = 256;
void attention(const float* q, int64_t n_q, const uint16_t* k, const uint16_t* v, int64_t n_kv, int heads,
               int kv_heads, int head_dim, int64_t first_position, float scale, float* out);

// The same for several sequences at once (a batch's), their rows shared out
// across threads together; each gets the bits it gets alone. A sequence's K
// and V may be read in place from L1's planes: context token j's row is
// slots[j] of the plane (slots null: row j).
struct AttentionSequence {
  const float* q = nullptr;  // [n_q][heads][head_dim]
  int64_t n_q = 0;
  const uint16_t *k = nullptr, *v = nullptr;  // BF16 planes of rows [kv_heads][head_dim]
  const uint32_t* slots = nullptr;            // [n_kv], or null
  int64_t n_kv = 0;
  int64_t first_position = 0;
  float* out = nullptr;  // [n_q][heads][head_dim]
};
// With a team (core/parallel.h), every rank calls it with the same
// arguments, the same `partials` included, and computes its share; it
// returns after the team's barrier. `partials` holds the key blocks of a
// decode step's few rows, which one rank computes and another merges.
struct AttentionPartials {
  struct Block {
    float max = 0, sum = 0;
  };
  std::vector<Block> blocks;   // [rows · blocks a row]
  std::vector<float> outputs;  // [rows · blocks a row][head_dim]
};
void attention(std::span<const AttentionSequence> sequences, int heads, int kv_heads, int head_dim, float scale,
               Team* team = nullptr, AttentionPartials* partials = nullptr);

// Rounds every value to the nearest BF16 (ties to even), in place.
void round_to_bf16(float* x, size_t n);

}  // namespace hiq::cpu
