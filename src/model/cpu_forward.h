// model/cpu_forward.h — the Qwen3-family forward pass on the CPU, reading and
// writing KV through the L1 pool.
//
// For one sequence: tokens[0, first_new) already have their KV in L1 (computed
// earlier, or restored from L2), tokens[first_new, n) are computed now. Each
// layer writes the new tokens' K and V rows into their L1 slots, then reads the
// K and V of the whole context back from L1 for attention — so attention sees
// exactly what the pool holds, restored KV included, as on the GPU.
//
// Numerics follow the reference (transformers in bf16): FP32 math, and every
// tensor the model stores — projections, normalised activations, the residual
// stream, K and V — rounded to BF16 at the same steps.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "core/status.h"
#include "memory/device_kv_pool.h"
#include "model/cpu_ops.h"
#include "model/rope.h"

namespace hiq {

// The sizes of a Qwen3-family model (from ModelConfig).
struct ModelShape {
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;       // query heads
  int num_kv_heads = 0;
  int head_dim = 0;
  float rms_norm_eps = 1e-6f;
  bool qk_norm = false;    // Qwen3: RMSNorm over each head of q and k before RoPE
  RopeTable rope;
};

// Views of one layer's weights in the checkpoint's dtypes; matrices are
// [out features][in features]. Absent biases and norms have data == nullptr.
struct LayerWeights {
  cpu::VectorView input_norm;                 // [hidden]
  cpu::MatrixView q_proj, k_proj, v_proj;     // [heads·head_dim | kv_heads·head_dim][hidden]
  cpu::VectorView q_bias, k_bias, v_bias;     // [out] (Qwen2, attention_bias); else absent
  cpu::VectorView q_norm, k_norm;             // [head_dim] (Qwen3); else absent
  cpu::MatrixView o_proj;                     // [hidden][heads·head_dim]
  cpu::VectorView o_bias;                     // [hidden] (attention_bias on some Llama-shaped models); else absent
  cpu::VectorView post_attention_norm;        // [hidden]
  cpu::MatrixView gate_proj, up_proj;         // [intermediate][hidden]
  cpu::MatrixView down_proj;                  // [hidden][intermediate]
};

struct CpuModelWeights {
  cpu::MatrixView embed_tokens;  // [vocab][hidden]
  std::vector<LayerWeights> layers;
  cpu::VectorView final_norm;    // [hidden]
  cpu::MatrixView lm_head;       // [vocab][hidden]; the embedding when tied
};

// Checks that the weights have the shapes `shape` implies; the error names the
// layer and the tensor.
Status check_weights(const ModelShape& shape, const CpuModelWeights& weights);

// The checks every forward pass makes of one sequence: one slot per token,
// slots inside `l1`, at least one new token, token ids inside the
// vocabulary, and a pool of the model's KV geometry.
Status check_sequence(const ModelShape& shape, const DeviceKvPool& l1, std::span<const int32_t> tokens,
                      std::span<const SlotId> slots, size_t first_new);

// Called before a layer reads the context's KV from L1: the place to wait for
// that layer of a restore (TransferEngine::wait_layer). A non-OK status stops
// the forward pass with that error.
using BeforeAttention = std::function<Status(int layer)>;

// Runs tokens[first_new, n) with the KV of tokens[0, first_new) read from
// `slots` in `l1`, and writes the new tokens' KV into their slots. Returns the
// logits of the last token ([vocab]), or of every new token ([n_new][vocab])
// when `all_logits`. Errors: mismatched spans, first_new ≥ n, a token id out of
// the vocabulary, an L1 pool of another geometry, a new token's slot repeated
// or also the context's, a failed pool access, or the error of
// `before_attention`.
Result<std::vector<float>> cpu_forward(const ModelShape& shape, const CpuModelWeights& weights, DeviceKvPool& l1,
                                       std::span<const int32_t> tokens, std::span<const SlotId> slots,
                                       size_t first_new, bool all_logits = false,
                                       const BeforeAttention& before_attention = nullptr);

// One sequence of a batched pass: cpu_forward's arguments.
struct CpuSequence {
  std::span<const int32_t> tokens;
  std::span<const SlotId> slots;
  size_t first_new = 0;
  bool all_logits = false;
  BeforeAttention before_attention;  // null: nothing to wait for
};

// Every sequence of `batch` in one pass: their new tokens share each matrix
// product (one pass over the weights for the batch), and each attends to its
// own context. A sequence's logits are the bits cpu_forward gives it alone
// (each value of a token's row is computed the same way in any batch:
// cpu_kernels.h). Each layer's new K and V are all written before any
// sequence's attention reads L1, so a pass may not write a slot twice nor
// write a slot that a context holds (contexts may share slots: a common
// prefix). Errors: cpu_forward's, for any sequence (the pass stops at the
// first), and such a slot. An empty batch gives no logits.
Result<std::vector<std::vector<float>>> cpu_forward_batch(const ModelShape& shape, const CpuModelWeights& weights,
                                                          DeviceKvPool& l1, std::span<const CpuSequence> batch);

// Turns a tensor-parallel rank's output of o_proj or down_proj — a partial
// sum over its heads or MLP columns, rounded to BF16 — into the whole sum,
// `bias` (whole; absent for down_proj) added once, rounded to BF16, in place.
using RankAllReduce = std::function<Status(std::vector<float>& partial, const cpu::VectorView& bias)>;

// cpu_forward_batch as one tensor-parallel rank runs it (model/tensor_parallel.h):
// `shape` and `weights` are the rank's (its heads and MLP columns), `l1` its
// pool, and `all_reduce` meets the other ranks after each row-parallel
// product. Returns each sequence's logits when `want_logits`, else nothing
// (every rank holds the same hidden states; one computes them).
// cpu_forward_batch is this pass with the whole model and no all-reduce.
Result<std::vector<std::vector<float>>> cpu_forward_rank(const ModelShape& shape, const CpuModelWeights& weights,
                                                         DeviceKvPool& l1, std::span<const CpuSequence> batch,
                                                         const RankAllReduce& all_reduce, bool want_logits);

}  // namespace hiq
