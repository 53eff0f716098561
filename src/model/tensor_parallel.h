// model/tensor_parallel.h — a Qwen3-family model split over N tensor-parallel
// ranks, Megatron-style, and its forward pass on the CPU with one thread per
// rank.
//
// The split. Rank r of N holds:
//   - query heads [r·H/N, (r+1)·H/N) — the rows of q_proj (and its bias) and
//     the columns of o_proj that belong to them;
//   - the KV heads those query heads read: KV/N of them when N divides the KV
//     heads, else (N a multiple of KV) one, replicated on N/KV ranks — the
//     rows of k_proj and v_proj, and its L1 pool's geometry, as `hiq layout
//     --tp` computes it (kv/geometry.h);
//   - MLP columns [r·I/N, (r+1)·I/N) — rows of gate_proj and up_proj, columns
//     of down_proj.
// Norms, embeddings and the LM head are whole on every rank. A layer then
// needs two all-reduces: after o_proj and after down_proj, each rank holding
// a partial sum over its heads or columns.
//
// The CPU pass (CpuTpModel) runs each rank on a thread of its own, over its
// own L1 pool; the pools are addressed by the same slots, so one radix tree
// serves all ranks. A rank's products are rounded to BF16 as a GPU rank's
// would be, and the all-reduce adds the ranks' partials in rank order in FP32
// and rounds once: deterministic, and within BF16 rounding of the one-rank
// pass (cpu_forward).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "memory/device_kv_pool.h"
#include "model/cpu_forward.h"

namespace hiq {

struct TpShard {
  int rank = 0, size = 1;
  int q_head_begin = 0, q_heads = 0;    // query heads of this rank
  int kv_head_begin = 0, kv_heads = 0;  // KV heads it holds (a replica when size > the model's)
  int64_t mlp_begin = 0, mlp_columns = 0;  // its share of the MLP's intermediate columns
};

// Rank `rank`'s share of `shape` over `size` ranks. Errors say which count
// `size` does not divide: query heads, KV heads (nor a multiple of them), or
// the MLP's width.
Result<TpShard> tp_shard(const ModelShape& shape, int rank, int size);

// The sizes rank `shard` computes with: its heads and MLP columns (the shape
// its L1 pool and check_sequence see).
ModelShape rank_shape(const ModelShape& shape, const TpShard& shard);

class CpuTpModel {
 public:
  // Splits `weights` (which must outlive this) over `size` ranks. Column
  // shards of o_proj and down_proj are copied; everything else is a view.
  static Result<std::unique_ptr<CpuTpModel>> create(const ModelShape& shape, const CpuModelWeights& weights,
                                                    int size);

  int size() const { return static_cast<int>(ranks_.size()); }
  // The whole model's sizes (rank_shape(shape(), shard(r)) is rank r's).
  const ModelShape& shape() const { return shape_; }
  const TpShard& shard(int rank) const { return ranks_[static_cast<size_t>(rank)].shard; }
  // Rank `rank`'s sizes and weights (views of the whole model's, its o_proj
  // and down_proj columns copied): what a GPU rank uploads.
  const ModelShape& shard_shape(int rank) const { return ranks_[static_cast<size_t>(rank)].shape; }
  const CpuModelWeights& shard_weights(int rank) const { return ranks_[static_cast<size_t>(rank)].weights; }

  // cpu_forward over the ranks: pools[r] is rank r's L1 pool, of
  // rank_shape(…, shard(r))'s KV geometry; tokens[0, first_new) have their KV
  // at `slots` in every pool. The logits are rank 0's (every rank computes
  // the same). `before_attention` is called by every rank, on its own
  // thread, before that rank's attention of each layer reads its pool: the
  // place to wait for a restore of that layer (it must be safe to call from
  // several threads at once). Errors: as cpu_forward's, per rank, and a pool
  // count other than size().
  Result<std::vector<float>> forward(std::span<DeviceKvPool* const> pools, std::span<const int32_t> tokens,
                                     std::span<const SlotId> slots, size_t first_new, bool all_logits = false,
                                     const BeforeAttention& before_attention = nullptr) const;
  // cpu_forward_batch over the ranks, as forward() is cpu_forward: each
  // sequence's logits, the bits forward() gives it alone.
  Result<std::vector<std::vector<float>>> forward_batch(std::span<DeviceKvPool* const> pools,
                                                        std::span<const CpuSequence> batch) const;

 private:
  struct Rank {
    TpShard shard;
    ModelShape shape;                                  // rank_shape(…)
    CpuModelWeights weights;                           // its layers' shards; the rest whole
    std::vector<std::vector<std::byte>> column_shards;  // the copied o_proj and down_proj columns
  };
  struct AllReduce;  // the ranks' meeting point (tensor_parallel.cc)
  CpuTpModel() = default;
  Status run_rank(int rank, DeviceKvPool& pool, std::span<const CpuSequence> batch, AllReduce& reduce,
                  std::vector<std::vector<float>>* logits) const;

  ModelShape shape_;
  std::vector<Rank> ranks_;
};

}  // namespace hiq
