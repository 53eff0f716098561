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

#include "model/rope.h"

namespace hiq::cpu {

enum class WeightType : uint8_t { kBf16, kF16, kF32 };

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

// y[i] = x̂[i] · weight with x̂[i] = x[i] / sqrt(mean(x[i]²) + eps), per row of
// n features; y may be x. `bf16_normalized`: x̂ is rounded to BF16 before the
// weight multiplies it, as the reference's RMSNorm casts it back to the
// activations' dtype first.
void rms_norm(const float* x, int64_t m, int64_t n, const VectorView& weight, float eps, float* y,
              bool bf16_normalized = false);

// out = silu(gate) · up, elementwise; out may alias either input.
void silu_mul(const float* gate, const float* up, size_t n, float* out);

// Rotates `heads` vectors of head_dim at `position` in place, the "rotate
// half" convention of Qwen/Llama checkpoints: for i < d/2, with
// θ = position · inv_freq[i] and s = table.attention_scale,
//   x'[i] = x[i]·cos θ·s − x[i + d/2]·sin θ·s,  x'[i + d/2] = x[i + d/2]·cos θ·s + x[i]·sin θ·s.
void apply_rope(float* x, int heads, int head_dim, int64_t position, const RopeTable& table);

// Causal grouped-query attention. q: [n_q][heads][head_dim] at positions
// first_position … first_position + n_q − 1; k, v: [n_kv][kv_heads][head_dim]
// at positions 0 … n_kv − 1 (n_kv ≥ first_position + n_q). Query head h reads
// KV head h / (heads / kv_heads). out: [n_q][heads][head_dim].
void attention(const float* q, int64_t n_q, const float* k, const float* v, int64_t n_kv, int heads, int kv_heads,
               int head_dim, int64_t first_position, float scale, float* out);

// Rounds every value to the nearest BF16 (ties to even), in place.
void round_to_bf16(float* x, size_t n);

}  // namespace hiq::cpu
