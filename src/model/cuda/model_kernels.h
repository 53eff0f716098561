// model/cuda/model_kernels.h (internal to the CUDA model) — the elementwise
// and row-wise steps of the Qwen3-family forward pass. The matrix products go
// to cuBLAS and attention to attention.h.
//
// Numerics follow the reference (transformers in bf16): FP32 math inside a
// kernel, BF16 wherever the model stores a tensor, rounded at the same steps.
// Every launcher takes a stream, allocates nothing and checks its launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"

namespace hiq::cuda {

using bf16 = __nv_bfloat16;

// out[r] = table[rows[r]] for r < n, rows of `width` elements: the embedding
// lookup, and the gather of the rows the LM head reads.
Status launch_gather_rows(const bf16* table, const int32_t* rows, int n, int width, bf16* out, cudaStream_t stream);

// For each of `rows` rows of `width`: x += delta (rounded to BF16; skipped
// when delta is null), then out = bf16(bf16(x / rms(x)) · weight).
Status launch_add_rms_norm(bf16* x, const bf16* delta, const bf16* weight, int rows, int width, float eps, bf16* out,
                           cudaStream_t stream);

// x[r] += bias, rounded to BF16 (the output projection's bias).
Status launch_add_bias(bf16* x, const bf16* bias, int rows, int width, cudaStream_t stream);

// The step between the QKV projection and attention, for each new token:
// adds the QKV bias, applies q/k-norm (per head) and RoPE to q and k, writes q
// back in place and k, v into the token's L1 slot — none for a token whose
// slot is kNoKvSlot (the padding rows of a decode batch).
inline constexpr uint32_t kNoKvSlot = UINT32_MAX;
struct QkvArgs {
  bf16* qkv = nullptr;            // [tokens][(heads + 2·kv_heads)·head_dim]: q | k | v
  const bf16* bias = nullptr;     // [(heads + 2·kv_heads)·head_dim] or null
  const bf16* q_norm = nullptr;   // [head_dim] or null (no QK-norm)
  const bf16* k_norm = nullptr;
  const int32_t* positions = nullptr;  // [tokens]
  const uint32_t* slots = nullptr;     // [tokens]: where each token's K and V go, or kNoKvSlot
  bf16* k_plane = nullptr;        // L1 planes of the layer, rows of [kv_heads][head_dim]
  bf16* v_plane = nullptr;
  const float* inv_freq = nullptr;  // [head_dim / 2]
  float rope_scale = 1.f;           // yarn's attention scale on cos and sin
  float eps = 1e-6f;
  int tokens = 0, heads = 0, kv_heads = 0, head_dim = 0;
};
Status launch_qkv_finish(const QkvArgs& args, cudaStream_t stream);

// out[r][i] = bf16(bf16(silu(gate[r][i])) · up[r][i]), gate_up = [rows][2·width]: gate | up.
Status launch_silu_mul(const bf16* gate_up, int rows, int width, bf16* out, cudaStream_t stream);

// out[r] = the index of the largest of logits[r][0, vocab) (the first on ties).
Status launch_argmax(const float* logits, int rows, int vocab, int32_t* out, cudaStream_t stream);

}  // namespace hiq::cuda
