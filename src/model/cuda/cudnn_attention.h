// model/cuda/cudnn_attention.h (internal to the CUDA model) — causal
// grouped-query attention for prefill through cuDNN's fused flash attention
// (its "SDPA forward"), a second backend beside our own kernels
// (attention.h), so that `hiq bench attention` measures both in one run and
// the runtime can use cuDNN's where it is faster.
//
// Loading. cuDNN is opened at run time (dlopen of libcudnn.so.9): hiq never
// links it, and a machine without it (or with a cuDNN older than 9) gets
// kUnavailable from CudnnAttention::create(), never a crash. Only cuDNN's
// backend (graph) C API is used, a dozen functions.
//
// The graph. cuDNN has no "attention" call in this API: its fused flash
// attention engines recognise a pattern of plain operations, and the graph
// must be exactly that pattern or no engine takes it. Ours, per sequence
// (batch 1, B = 1; H query heads, H_kv KV heads, S_q = q_len, S_kv = kv_len):
//   S  = Q · Kᵀ                       matmul, FP32 accumulation
//   S' = S · scale                    pointwise MUL, scale passed by value
//   masked where column > row + S_kv − S_q   (bottom-right causal: query i
//        sits at position kv_len − q_len + i), as GEN_INDEX rows and columns,
//        ADD, SUB, CMP_GE and a BINARY_SELECT of −inf
//   P  = softmax(S') in BF16          MAX, SUB, EXP, ADD-reduction, DIV
//   O  = P · V                        matmul
// Every intermediate is virtual: the engine keeps it on chip. K goes in
// transposed through its strides alone, so K, V and O need no copies.
//
// Plans. Finding an engine and finalizing its plan costs milliseconds to
// seconds (some engines are compiled at run time), so a plan is built once
// per shape (lengths, heads, head dim, Q's token stride) and cached, least
// recently used dropped past CudnnAttentionOptions::max_plans. The engine is
// the first of cuDNN's heuristics (mode A, then the fallback list) whose
// plan finalizes.
//
// K and V come contiguous, in context order: what the staged Hopper form's
// staging buffer already holds (attention_sm90.cu: a K plane, then a V plane,
// each [row][kv_heads][head_dim]; sequence b's context at rows slot_start +
// 128·b, followed by 128 zero rows), so one sequence of it is a valid input.
// A batch runs as one call per sequence.
//
// When cuDNN refuses a graph or a plan, the Status carries its last error
// message; CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr (cuDNN 9; the older
// CUDNN_LOGERR_DBG=1 still works) make it log every refusal with its reason.
//
// An object is bound to the device current at create() and is not
// thread-safe: one per thread (or stream) that runs attention.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace hiq::cuda {

// One sequence's attention: q_len new tokens after kv_len − q_len cached ones.
struct CudnnAttentionShape {
  int q_len = 0;   // new tokens (rows of Q and O)
  int kv_len = 0;  // context tokens, the new ones included (≥ q_len)
  int heads = 0, kv_heads = 0, head_dim = 0;  // heads a multiple of kv_heads; head_dim 64 or 128
  int64_t q_token_stride = 0;  // elements from one token of Q to the next (≥ heads · head_dim, a multiple of 8)

  bool operator==(const CudnnAttentionShape&) const = default;
};

struct CudnnAttentionArgs {
  CudnnAttentionShape shape;
  const __nv_bfloat16* q = nullptr;  // [q_len][q_token_stride]; head h at h · head_dim
  const __nv_bfloat16* k = nullptr;  // [kv_len][kv_heads][head_dim], contiguous (a staged context)
  const __nv_bfloat16* v = nullptr;  // [kv_len][kv_heads][head_dim], contiguous
  __nv_bfloat16* out = nullptr;      // [q_len][heads][head_dim]
  float scale = 0;                   // softmax scale, 1/sqrt(head_dim)
  // At least prepare(shape)'s bytes of device memory (may be null when that is 0).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

struct CudnnAttentionOptions {
  size_t max_plans = 64;  // plans cached; the least recently used one is dropped past it
};

struct CudnnAttentionStats {
  uint64_t plans_built = 0;    // shapes whose plan was built
  uint64_t plan_hits = 0;      // calls that found their shape's plan cached
  uint64_t plans_dropped = 0;  // plans dropped to stay within max_plans
};

// Whether a shape is one this backend accepts (kInvalidArgument saying why
// not). cuDNN may still find no engine for it: prepare() says so.
Status validate_cudnn_attention_shape(const CudnnAttentionShape& shape);

class CudnnAttention {
 public:
  // Loads cuDNN and makes a handle on the current device. kUnavailable when
  // the library cannot be loaded, is older than 9 or finds no usable GPU.
  static Result<std::unique_ptr<CudnnAttention>> create(const CudnnAttentionOptions& options = {});
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // The loaded library's version, "9.19.0".
  const std::string& version() const;

  // Builds (or finds) the plan of `shape`; the bytes of workspace its runs
  // need. kUnavailable when no cuDNN engine supports the shape on this GPU
  // (the message carries cuDNN's own reasons).
  Result<size_t> prepare(const CudnnAttentionShape& shape);

  // Which engine runs `shape`'s plan ("engine 8 (heuristics mode A)"),
  // building the plan if needed.
  Result<std::string> engine_of(const CudnnAttentionShape& shape);

  // Enqueues the attention of one sequence on `stream`, building the plan
  // first if this shape has none. The buffers must stay alive until the
  // work completes; pointers must be 16-byte aligned.
  Status run(const CudnnAttentionArgs& args, cudaStream_t stream);

  const CudnnAttentionStats& stats() const;

 private:
  struct Impl;
  explicit CudnnAttention(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hiq::cuda
