// engine/cuda_model_runner.h — the real model behind the scheduler, on a GPU.
//
// Runs a whole batch (prefills with their cached prefixes and decode steps
// together) in one CudaModel forward pass over the CUDA L1 pool. An item whose
// prefix is being restored from L2 makes the pass's stream wait, on the
// device, for each layer of its restore just before that layer's attention
// (CudaTransferEngine::stream_wait_layer): later layers keep arriving while
// earlier ones compute. Greedy next tokens are chosen on the GPU; a batch with
// sampled requests brings their logits back and samples on the host. Its
// clock is the wall clock.
#pragma once

#include <chrono>

#include "engine/model_runner.h"
#include "model/cuda_model.h"
#include "transfer/cuda_transfer_engine.h"

namespace hiq {

class CudaModelRunner final : public ModelRunner {
 public:
  // `model`, `l1` (a CUDA pool) and `engine` (null without L2) must outlive
  // the runner.
  CudaModelRunner(CudaModel& model, DeviceKvPool& l1, CudaTransferEngine* engine);

  Result<std::vector<ForwardResult>> forward(std::span<const ForwardItem> batch) override;
  double now() const override;
  void advance_to(double) override {}  // the wall clock cannot be moved

 private:
  Result<std::vector<ForwardResult>> run_pass(std::span<const ForwardItem> batch);

  CudaModel& model_;
  DeviceKvPool& l1_;
  CudaTransferEngine* engine_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace hiq
