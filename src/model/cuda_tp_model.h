// model/cuda_tp_model.h — a Qwen3-family model split over N tensor-parallel
// ranks on CUDA GPUs, in host-only terms.
//
// One process, one host thread per rank for each pass. The split is
// CpuTpModel's (model/tensor_parallel.h): rank r holds its query and KV
// heads and its MLP columns as a CudaModel of their shape on GPU
// device(r), with its own stream, and meets the other ranks twice a layer
// (after o_proj and after down_proj) to add their partial products
// (RowParallelReduce), through the collective the options name:
//   - kNccl: ncclAllReduce, in place. NCCL is loaded when the first such
//     model is made (libnccl.so.2), so a build or machine without it runs
//     everything else.
//   - kPeer: ours. Each rank records an event after its product; once all
//     have (a host barrier), each rank's stream waits for every rank's
//     event, adds the partials in rank order in FP32, rounds once (the sum
//     CpuTpModel makes, on any devices), and waits again for every rank to
//     have read its partial before overwriting it.
//
// Why threads and not a process per GPU: the radix tree, the scheduler and
// the transfer decisions stay one, so every rank serves the same slots at
// the same step without any collective outside the forward pass; a rank's
// thread only launches its pass.
//
// Failures. A pass whose `before_attention` fails on some rank goes on
// (every rank still meets the others) and returns that error; its new
// tokens' KV is then unspecified on every rank, as CudaModel's is after an
// error. A rank whose pass fails otherwise leaves it; every sum begins with
// the ranks meeting on the host, where the others see that and stop before
// enqueuing another, so no stream waits on the device for a rank that will
// not come, and the next pass runs as usual. Under NCCL, a rank leaving
// after it enqueued sums in the pass (its stream may be stopped by a fault,
// leaving the others' sums waiting for it), or an enqueue that fails, is
// final: the communicators are aborted, so that no rank waits, and every
// later pass is refused.
//
// Served by model/cuda/cuda_tp_model.cu in a CUDA build, and by a stub that
// answers kUnavailable otherwise.
#pragma once

#include <functional>
#include <memory>
#include <span>

#include "core/status.h"
#include "memory/device_kv_pool.h"
#include "model/cpu_forward.h"
#include "model/cuda_model.h"
#include "model/cuda_model_options.h"

namespace hiq {

// Called by each rank, on its thread, with its stream, before its
// attention of `layer` reads its L1 pool (e.g. to wait for that layer of
// a restore into that pool).
using BeforeRankAttention = std::function<Status(int rank, int layer, void* stream)>;

class CudaTpModel {
 public:
  virtual ~CudaTpModel() = default;

  // Runs `batch` on every rank: l1[r] is rank r's CUDA pool (on device(r)),
  // of rank_shape(r)'s KV geometry, addressed by the same slots as the
  // others. The output is rank 0's (every rank computes the same). One pass
  // at a time. Errors: as CudaModel::forward's, per rank, prefixed by the
  // rank; a pool count other than size().
  virtual Result<ModelOutput> forward(std::span<DeviceKvPool* const> l1, std::span<const ModelSequence> batch,
                                      LogitsWanted logits, const BeforeRankAttention& before_attention = nullptr) = 0;

  // The collective alone: sums `elements` BF16 values over the ranks in
  // place (buffers[r] on device(r)), one thread per rank, and waits for it.
  virtual Status all_reduce(std::span<void* const> buffers, size_t elements) = 0;

  virtual int size() const = 0;
  virtual int device(int rank) const = 0;
  virtual TpCollective collective() const = 0;
  virtual const ModelShape& shape() const = 0;               // the whole model's
  virtual const ModelShape& rank_shape(int rank) const = 0;  // rank r's heads and columns
  virtual void* stream(int rank) const = 0;                  // rank r's cudaStream_t
  virtual size_t weight_bytes() const = 0;                   // every rank's, together
};

// Splits `weights` over `size` ranks and uploads each rank's share to its
// GPU. Errors: invalid `options` (CudaTpOptions::validate), a size that does
// not split the model (tp_shard's error), a GPU that does not exist, GPUs
// without peer access under kPeer, NCCL absent or failing under kNccl, no
// CUDA backend (kUnavailable), or make_cuda_model's error on a rank.
Result<std::unique_ptr<CudaTpModel>> make_cuda_tp_model(const ModelShape& shape, const CpuModelWeights& weights,
                                                        int size, const CudaTpOptions& options = {});

}  // namespace hiq
