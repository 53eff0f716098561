#include "engine/cuda_model_runner.h"

#include <algorithm>

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
  // Greedy items take the argmax computed on the GPU; sampled ones need their logits.
  const bool sampled = std::any_of(batch.begin(), batch.end(), [](const ForwardItem& i) { return i.sampling; });
  HIQ_ASSIGN_OR_RETURN(ModelOutput out,
                       model_.forward(l1_, sequences, sampled ? LogitsWanted::kLast : LogitsWanted::kNone,
                                      loads.empty() ? BeforeLayerAttention() : wait_for_restores));
  std::vector<TokenId> next(out.next_tokens.begin(), out.next_tokens.end());
  const auto vocab = static_cast<size_t>(model_.shape().vocab_size);
  for (size_t i = 0; i < batch.size(); ++i)
    if (batch[i].sampling != nullptr)
      next[i] = sample_token(std::span(out.logits).subspan(i * vocab, vocab), *batch[i].sampling, *batch[i].rng);
  return next;
}

}  // namespace hiq
