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
//
// Under tensor parallelism (--tp-size N) the pass is CudaTpModel's over the
// ranks' pools, and each rank's stream waits for its own part of a restore
// (CudaTpTransferEngine::stream_wait_rank_layer).
#pragma once

#include <chrono>
#include <vector>

#include "engine/model_runner.h"
#include "model/cuda_model.h"
#include "model/cuda_tp_model.h"
#include "transfer/cuda_transfer_engine.h"

namespace hiq {

class CudaModelRunner final : public ModelRunner {
 public:
  // `model`, `l1` (a CUDA pool) and `engine` (null without L2) must outlive
  // the runner.
  CudaModelRunner(CudaModel& model, DeviceKvPool& l1, CudaTransferEngine* engine);
  // Tensor parallelism: pools[r] is rank r's (on its GPU); all must outlive the runner.
  CudaModelRunner(CudaTpModel& model, std::vector<DeviceKvPool*> pools, CudaTpTransferEngine* engine);

  Result<std::vector<ForwardResult>> forward(std::span<const ForwardItem> batch) override;
  double now() const override;
  void advance_to(double) override {}  // the wall clock cannot be moved

 private:
  Result<std::vector<ForwardResult>> run_pass(std::span<const ForwardItem> batch);

  // The pass over `sequences` with each rank's restore waits for `loads`.
  Result<ModelOutput> run_model(std::span<const ModelSequence> sequences, LogitsWanted wanted,
                                std::span<const Ticket> loads);
  const ModelShape& shape() const { return model_ != nullptr ? model_->shape() : tp_->shape(); }
  bool has_engine() const { return engine_ != nullptr || tp_engine_ != nullptr; }

  CudaModel* model_ = nullptr;  // one GPU
  DeviceKvPool* l1_ = nullptr;
  CudaTransferEngine* engine_ = nullptr;
  CudaTpModel* tp_ = nullptr;  // tensor parallelism
  std::vector<DeviceKvPool*> pools_;
  CudaTpTransferEngine* tp_engine_ = nullptr;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace hiq
