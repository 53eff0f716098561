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

#include <cstdint>
#include <string_view>
#include <vector>

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
  // Prefill passes (at least 256 rows) on a Hopper GPU apply the residual
  // adds and the SiLU gate in the epilogues of the products before them
  // (model/cuda/gemm_sm90.h) instead of in kernels of their own
  // (--enable-fused-prefill). The epilogues keep the separate kernels' bits;
  // the products are our kernel's, which sums in another order than cuBLAS.
  bool fused_prefill = false;

  // Errors (kInvalidArgument) start with the field's name.
  Status validate() const;
};

// How the ranks of a tensor-parallel model on GPUs (model/cuda_tp_model.h)
// add up their row-parallel products.
enum class TpCollective : uint8_t {
  kNccl,  // ncclAllReduce (BF16 sum over NCCL's rings or trees); one distinct GPU per rank
  kPeer,  // ours: every rank adds all partials in rank order in FP32 and rounds once;
          // ranks on one GPU, or on GPUs with peer access to each other
};
std::string_view tp_collective_name(TpCollective collective);  // "nccl", "peer"
Result<TpCollective> parse_tp_collective(std::string_view name);

struct CudaTpOptions {
  // devices[r] is rank r's GPU; empty: rank r on GPU r. kPeer allows a GPU
  // to repeat (every rank on one GPU is how the tests run it); kNccl does not.
  std::vector<int> devices;
  TpCollective collective = TpCollective::kNccl;
  CudaModelOptions model;  // every rank's (decode graphs and fused products are off under TP)

  // Errors (kInvalidArgument) start with the field's name ("devices list
  // …"): a device list of another length than `size`, a negative device, a
  // GPU repeated under kNccl; or model's error.
  Status validate(int size) const;
  // Rank r's GPU.
  int device(int rank) const { return devices.empty() ? rank : devices[static_cast<size_t>(rank)]; }
};

// The rows a decode batch of `batch` sequences is computed at: 1, 2, 4, 8,
// then the next multiple of 8, never above `max_batch`; 0 (its own size) when
// batch > max_batch.
int decode_batch_bucket(int batch, int max_batch);

// The context a decode batch's attention splits are sized for: the next power
// of two ≥ max_kv_len, at least 256 (max_kv_len itself above 2^30).
int decode_context_bucket(int max_kv_len);

}  // namespace hiq
