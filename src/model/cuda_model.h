// model/cuda_model.h — the Qwen3-family forward pass on a CUDA GPU, in
// host-only terms.
//
// CudaModel holds the weights in GPU memory (BF16; F16 and F32 checkpoints
// are rounded to BF16 once, at upload) and runs batches of sequences on its
// own stream: every new token of every sequence goes through one set of
// cuBLASLt matrix products, and attention reads each sequence's context from
// its slots in a CUDA L1 pool (make_cuda_device_kv_pool) — the cached prefix,
// restored from L2 or not, and the new tokens, whose K and V the pass writes
// into their slots first.
//
// Before a layer's attention reads L1, the pass calls `before_attention(layer,
// stream)`: the place to make the stream wait, on the device, for that layer
// of a restore (CudaTransferEngine::stream_wait_layer).
//
// Decode steps replay CUDA graphs, one per (batch bucket, context bucket)
// (model/cuda_model_options.h), captured the first time a bucket is met; a
// pass with a `before_attention` hook or a profile runs kernel by kernel.
//
// Numerics follow the reference (transformers in bf16) step by step: BF16
// activations, residual stream and KV; FP32 accumulation in every product,
// norm and softmax; logits in FP32.
//
// Served by model/cuda/cuda_model.cu in a CUDA build, and by a stub that
// answers kUnavailable otherwise.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "memory/device_kv_pool.h"
#include "model/cpu_forward.h"
#include "model/cuda_model_options.h"

namespace hiq {

// One sequence of a batch: tokens[0, first_new) have their KV in L1 already,
// tokens[first_new, n) are computed now.
struct ModelSequence {
  std::span<const int32_t> tokens;
  std::span<const SlotId> slots;  // one L1 slot per token
  size_t first_new = 0;
};

enum class LogitsWanted : uint8_t {
  kNone,  // next tokens only (argmax on the GPU)
  kLast,  // each sequence's last token: [sequences][vocab]
  kAll,   // every new token: [Σ new tokens][vocab], sequence by sequence
};

struct ModelOutput {
  std::vector<int32_t> next_tokens;  // greedy: the argmax after each sequence's last token
  std::vector<float> logits;         // as asked for by LogitsWanted
};

using BeforeLayerAttention = std::function<Status(int layer, void* stream)>;

// Device time of one forward pass by component. A pass given a profile marks
// each stage boundary on its stream with a CUDA event and reads the events
// once, after the synchronisation that ends every pass; a pass given none
// records nothing. The time from one mark to the next is charged to the stage
// the first one opens, a wait for the host to launch it included, so the
// components add up to the pass's device time from its input copy to its
// results.
struct ForwardProfile {
  double gemm_seconds = 0;              // the layers' projections: QKV, O, gate|up, down
  double attention_seconds = 0;         // attention over L1, with the combine of split contexts
  double norm_elementwise_seconds = 0;  // embedding and row gathers, RMSNorms, QKV finish (bias,
                                        // q/k-norm, RoPE, KV into L1), SiLU·up, the O bias
  double lm_head_seconds = 0;           // the LM head's product and the argmax
  double other_seconds = 0;             // the input copy, waits for restores, the ranks' all-reduces
                                        // (tensor parallelism), the results' copy
  double total_seconds() const {
    return gemm_seconds + attention_seconds + norm_elementwise_seconds + lm_head_seconds + other_seconds;
  }
};

// What the decode graphs have done (CudaModel::graph_stats).
struct CudaGraphStats {
  uint64_t captured = 0;          // graphs captured and instantiated
  uint64_t replayed = 0;          // passes run by one graph launch
  uint64_t capture_failures = 0;  // failed captures (logged once); their bucket ran kernel by kernel
  uint64_t dropped = 0;           // graphs destroyed: scratch memory or the L1 pool moved, or graphs turned off
  size_t held = 0;                // graphs held now
};

class CudaModel {
 public:
  virtual ~CudaModel() = default;

  // Runs `batch` on the model's stream and waits for its results. Errors:
  // mismatched spans, first_new ≥ n, token ids outside the vocabulary, slots
  // outside `l1`, a pool that is not a CUDA pool of the model's geometry, a
  // failed CUDA call, or the error of `before_attention` — after which the
  // new tokens' slots hold unspecified KV (the caller recomputes). With a
  // `profile`, the pass also fills it in (ForwardProfile).
  virtual Result<ModelOutput> forward(DeviceKvPool& l1, std::span<const ModelSequence> batch, LogitsWanted logits,
                                      const BeforeLayerAttention& before_attention = nullptr,
                                      ForwardProfile* profile = nullptr) = 0;

  // Turns decode graphs on or off (off destroys them); starts as
  // CudaModelOptions::cuda_graphs. The results are the same bits either way.
  virtual void set_cuda_graphs(bool enabled) = 0;
  virtual CudaGraphStats graph_stats() const = 0;

  // The cudaStream_t every forward pass runs on.
  virtual void* stream() const = 0;
  virtual const ModelShape& shape() const = 0;
  // Device memory: the weights, and the largest scratch space a pass used so far.
  virtual size_t weight_bytes() const = 0;
  virtual size_t workspace_bytes() const = 0;
};

// One tensor-parallel rank's meeting with the others (model/cuda_tp_model.h):
// replaces `partial` — `elements` BF16 values on the model's device, this
// rank's share of a row-parallel product (o_proj, down_proj) — by the sum of
// every rank's, enqueued on `stream`. Every rank calls it at the same points
// of a pass, in the same order; an error ends the pass.
using RowParallelReduce = std::function<Status(void* partial, size_t elements, void* stream)>;

// Uploads `weights` (which must match `shape`: check_weights) to the current
// GPU. Errors: invalid `options`, no GPU or no CUDA backend (kUnavailable), a
// head_dim the attention kernel is not built for, or not enough device memory.
// With `reduce`, the model is one rank of a tensor-parallel split (`shape`
// and `weights` its share): each layer's o_proj and down_proj products go
// through it before they join the residual stream. Such a pass runs kernel
// by kernel (no decode graphs, no fused decode products), since the meeting
// is the host's.
Result<std::unique_ptr<CudaModel>> make_cuda_model(const ModelShape& shape, const CpuModelWeights& weights,
                                                   const CudaModelOptions& options = {},
                                                   RowParallelReduce reduce = nullptr);

}  // namespace hiq
