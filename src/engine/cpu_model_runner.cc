#include "engine/cpu_model_runner.h"


namespace hiq {

CpuModelRunner::CpuModelRunner(const ModelShape& shape, const CpuModelWeights& weights, DeviceKvPool& l1,
                               TransferEngine* engine)
    : shape_(shape), weights_(weights), l1_(l1), engine_(engine), start_(std::chrono::steady_clock::now()) {}

double CpuModelRunner::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

Result<std::vector<TokenId>> CpuModelRunner::forward(std::span<const ForwardItem> batch) {
  std::vector<TokenId> next;
  next.reserve(batch.size());
  for (const ForwardItem& item : batch) {
    if (item.load && !engine_) return failed_precondition("forward: a restore without a transfer engine");
    const BeforeAttention wait_for_restore = [&](int layer) -> Status {
      return item.load ? engine_->wait_layer(*item.load, layer) : Status::ok();
    };
    HIQ_ASSIGN_OR_RETURN(std::vector<float> logits,
                         cpu_forward(shape_, weights_, l1_, item.tokens, item.slots, item.first_new,
                                     /*all_logits=*/false, wait_for_restore));
    next.push_back(item.sampling != nullptr ? sample_token(logits, *item.sampling, *item.rng) : argmax_token(logits));
  }
  return next;
}

}  // namespace hiq
