// model/cuda_model_options.h — how the CUDA forward pass runs decode steps:
// the options `hiq serve` and `hiq bench model` set, and the shape a decode
// batch is computed at. Host-only; built with or without the CUDA backend.
//
// A decode batch (every sequence brings exactly one new token) of B ≤
// cuda_graph_max_batch sequences is computed at the shape of its bucket, as
// SGLang pads the batches of its CUDA graphs: decode_batch_bucket(B) rows,
// the rows past B being padding that stores no KV, and attention's context
// splits sized for decode_context_bucket(longest context) rather than the
// context itself. So graphs are few — one per (batch bucket, context bucket),
// captured on first use — and a step computes the same bits whether it
// replays a graph or launches its kernels one by one: turning graphs off
// changes the speed, never the tokens.
#pragma once

#include "core/status.h"

namespace hiq {

struct CudaModelOptions {
  // Replay decode steps from CUDA graphs; false launches every kernel of
  // every pass (--disable-cuda-graph).
  bool cuda_graphs = true;
  // The largest decode batch computed at its bucket's shape (and, with
  // cuda_graphs, through a graph); larger ones run at their own size,
  // kernel by kernel (--cuda-graph-max-bs).
  int cuda_graph_max_batch = 160;
  // Decode steps of at most 8 rows run each layer's RMSNorms, residual adds
  // and SiLU gate inside its matrix products (model/cuda/skinny_gemm.h), with
  // the same bits (--enable-fused-decode). Off by default: on the H200 the
  // fused step measured 1–6 % slower through CUDA graphs, where the small
  // kernels it saves overlap the products anyway (docs/benchmarks.md).
  bool fused_decode = false;

  // Errors (kInvalidArgument) start with the field's name.
  Status validate() const;
};

// The rows a decode batch of `batch` sequences is computed at: 1, 2, 4, 8,
// then the next multiple of 8, never above `max_batch`; 0 (its own size) when
// batch > max_batch.
int decode_batch_bucket(int batch, int max_batch);

// The context a decode batch's attention splits are sized for: the next power
// of two ≥ max_kv_len, at least 256 (max_kv_len itself above 2^30).
int decode_context_bucket(int max_kv_len);

}  // namespace hiq
