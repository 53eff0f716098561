// engine/cpu_model_runner.h — the real model behind the scheduler, on the CPU.
//
// Runs a batch as one cpu_forward_batch pass (its tokens share the matrix
// products; each item gets the logits it would get alone): an item's prefix
// is read from its L1 slots — restored from L2 where the item has a load
// ticket, each layer only once the transfer engine reports that layer done —
// and its new tokens' KV is written into their slots. The next token is greedy
// (argmax of the logits) or sampled as the item asks.
//
// Under tensor parallelism (--tp-size N) the pass is CpuTpModel's over N rank
// pools, one per rank, addressed by the same slots: the scheduler and the
// radix tree allocate from rank 0's pool, and a slot they hand out is that
// slot on every rank. A restore's layer is ready once every rank's part is
// (the transfer engine over the ranks), and each rank waits for it before its
// own attention. A rank that fails fails the pass, so the batch's requests.
// Its clock is the wall clock.
#pragma once

#include <chrono>
#include <vector>

#include "engine/model_runner.h"
#include "model/cpu_forward.h"

namespace hiq {

class CpuTpModel;

class CpuModelRunner final : public ModelRunner {
 public:
  // `shape` and `weights` (and the memory their views point to), `l1` and
  // `engine` (null without L2) must outlive the runner.
  CpuModelRunner(const ModelShape& shape, const CpuModelWeights& weights, DeviceKvPool& l1, TransferEngine* engine);
  // Tensor parallelism: `model` over `pools` (pools[r] is rank r's, of
  // rank_shape(…, model.shard(r))'s KV geometry; one per rank, checked at
  // each pass). `model`, the pools and `engine` (the transfer engine over
  // these pools, or null) must outlive the runner.
  CpuModelRunner(const CpuTpModel& model, std::vector<DeviceKvPool*> pools, TransferEngine* engine);

  Result<std::vector<ForwardResult>> forward(std::span<const ForwardItem> batch) override;
  double now() const override;
  void advance_to(double) override {}  // the wall clock cannot be moved

 private:
  const ModelShape& shape_;
  const CpuModelWeights* weights_ = nullptr;  // one rank
  const CpuTpModel* tp_ = nullptr;            // tensor parallelism
  std::vector<DeviceKvPool*> pools_;          // one rank's pool, or every rank's
  TransferEngine* engine_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace hiq
