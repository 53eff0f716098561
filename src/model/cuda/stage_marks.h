// model/cuda/stage_marks.h (internal to the CUDA model) — the events of a
// profiled forward pass (ForwardProfile in model/cuda_model.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "cuda/buffers.h"
#include "cuda/check.cuh"
#include "model/cuda_model.h"

namespace hiq::cuda {

// The components of ForwardProfile.
enum class Stage : uint8_t { kGemm, kAttention, kNormElementwise, kLmHead, kOther };

// The events of a profiled pass: mark() opens a stage on the stream (a no-op
// when the pass is not profiled, or when the stage is of the kind already
// open), finish() closes the last one, read() charges the time between marks
// once the stream has synchronised. Events are created on first use and
// reused by later passes.
class StageMarks {
 public:
  void begin(bool profiled) {
    on_ = profiled;
    used_ = 0;
  }
  Status mark(Stage stage, cudaStream_t stream) {
    if (!on_ || (used_ > 0 && stages_[used_ - 1] == stage)) return Status::ok();
    return record(stage, stream);
  }
  Status finish(cudaStream_t stream) { return on_ ? record(Stage::kOther, stream) : Status::ok(); }
  Result<ForwardProfile> read() const {
    ForwardProfile p;
    for (size_t i = 0; i + 1 < used_; ++i) {
      float ms = 0;
      HIQ_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, events_[i].get(), events_[i + 1].get()));
      const double seconds = ms * 1e-3;
      switch (stages_[i]) {
        case Stage::kGemm: p.gemm_seconds += seconds; break;
        case Stage::kAttention: p.attention_seconds += seconds; break;
        case Stage::kNormElementwise: p.norm_elementwise_seconds += seconds; break;
        case Stage::kLmHead: p.lm_head_seconds += seconds; break;
        case Stage::kOther: p.other_seconds += seconds; break;
      }
    }
    return p;
  }

 private:
  Status record(Stage stage, cudaStream_t stream) {
    if (used_ == events_.size()) {
      HIQ_ASSIGN_OR_RETURN(cuda::Event e, make_event(/*timing=*/true));
      events_.push_back(std::move(e));
      stages_.push_back(stage);
    }
    stages_[used_] = stage;
    HIQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(events_[used_].get(), stream));
    ++used_;
    return Status::ok();
  }

  bool on_ = false;
  size_t used_ = 0;
  std::vector<Event> events_;
  std::vector<Stage> stages_;
};

}  // namespace hiq::cuda
