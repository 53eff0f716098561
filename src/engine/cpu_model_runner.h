// engine/cpu_model_runner.h — the real model behind the scheduler, on the CPU.
//
// Runs each item of a batch through cpu_forward: the prefix is read from its L1
// slots — restored from L2 where the item has a load ticket, each layer only
// once the transfer engine reports that layer done — and the new tokens' KV is
// written into their slots. The next token is greedy (argmax of the logits)
// or sampled as the item asks.
// Its clock is the wall clock.
#pragma once

#include <chrono>

#include "engine/model_runner.h"
#include "model/cpu_forward.h"

namespace hiq {

class CpuModelRunner final : public ModelRunner {
 public:
  // `shape` and `weights` (and the memory their views point to), `l1` and
  // `engine` (null without L2) must outlive the runner.
  CpuModelRunner(const ModelShape& shape, const CpuModelWeights& weights, DeviceKvPool& l1, TransferEngine* engine);

  Result<std::vector<ForwardResult>> forward(std::span<const ForwardItem> batch) override;
  double now() const override;
  void advance_to(double) override {}  // the wall clock cannot be moved

 private:
  const ModelShape& shape_;
  const CpuModelWeights& weights_;
  DeviceKvPool& l1_;
  TransferEngine* engine_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace hiq
