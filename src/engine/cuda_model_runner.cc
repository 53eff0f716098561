#include "engine/cuda_model_runner.h"

namespace hiq {

CudaModelRunner::CudaModelRunner(CudaModel& model, DeviceKvPool& l1, CudaTransferEngine* engine)
    : model_(model), l1_(l1), engine_(engine), start_(std::chrono::steady_clock::now()) {}

double CudaModelRunner::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

Result<std::vector<TokenId>> CudaModelRunner::forward(std::span<const ForwardItem> batch) {
  std::vector<ModelSequence> sequences;
  std::vector<Ticket> loads;
  sequences.reserve(batch.size());
  for (const ForwardItem& item : batch) {
    if (item.load) {
      if (engine_ == nullptr) return failed_precondition("forward: a restore without a transfer engine");
      loads.push_back(*item.load);
    }
    sequences.push_back({item.tokens, item.slots, item.first_new});
  }
  const BeforeLayerAttention wait_for_restores = [&](int layer, void* stream) -> Status {
    for (Ticket load : loads) HIQ_RETURN_IF_ERROR(engine_->stream_wait_layer(load, layer, stream));
    return Status::ok();
  };
  HIQ_ASSIGN_OR_RETURN(ModelOutput out, model_.forward(l1_, sequences, LogitsWanted::kNone,
                                                       loads.empty() ? BeforeLayerAttention() : wait_for_restores));
  return std::vector<TokenId>(out.next_tokens.begin(), out.next_tokens.end());
}

}  // namespace hiq
