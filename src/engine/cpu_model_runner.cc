#include "engine/cpu_model_runner.h"

#include <algorithm>

#include "model/tensor_parallel.h"

namespace hiq {

CpuModelRunner::CpuModelRunner(const ModelShape& shape, const CpuModelWeights& weights, DeviceKvPool& l1,
                               TransferEngine* engine)
    : shape_(shape), weights_(&weights), pools_{&l1}, engine_(engine), start_(std::chrono::steady_clock::now()) {}

CpuModelRunner::CpuModelRunner(const CpuTpModel& model, std::vector<DeviceKvPool*> pools, TransferEngine* engine)
    : shape_(model.shape()),
      tp_(&model),
      pools_(std::move(pools)),
      engine_(engine),
      start_(std::chrono::steady_clock::now()) {}

double CpuModelRunner::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

Result<std::vector<ForwardResult>> CpuModelRunner::forward(std::span<const ForwardItem> batch) {
  for (const ForwardItem& item : batch) {
    if (item.load && !engine_) return failed_precondition("forward: a restore without a transfer engine");
    if (item.prompt_logprobs && item.first_new != 0)
      return failed_precondition("forward: prompt log-probabilities need the whole prompt computed");
  }
  // Each item's layers wait for its restore, if it has one. Under tensor
  // parallelism every rank calls this from its own thread; wait_layer is safe
  // to call concurrently.
  const auto wait_for_restore = [&](const ForwardItem& item) -> BeforeAttention {
    if (!item.load) return nullptr;
    return [this, &item](int layer) { return engine_->wait_layer(*item.load, layer); };
  };
  // One pass for the batch: its tokens share the matrix products.
  std::vector<CpuSequence> sequences;
  sequences.reserve(batch.size());
  for (const ForwardItem& item : batch)
    sequences.push_back(CpuSequence{item.tokens, item.slots, item.first_new, /*all_logits=*/item.prompt_logprobs,
                                    wait_for_restore(item)});
  HIQ_ASSIGN_OR_RETURN(std::vector<std::vector<float>> logits,
                       tp_ != nullptr ? tp_->forward_batch(pools_, sequences)
                                      : cpu_forward_batch(shape_, *weights_, *pools_.front(), sequences));

  std::vector<ForwardResult> results;
  results.reserve(batch.size());
  const auto vocab = static_cast<size_t>(shape_.vocab_size);
  for (size_t b = 0; b < batch.size(); ++b) {
    const ForwardItem& item = batch[b];
    // With all_logits, row i holds the logits after tokens[first_new + i].
    const std::span<const float> rows(logits[b]);
    const std::span<const float> last = rows.last(vocab);
    ForwardResult r;
    r.next = item.sampling != nullptr ? sample_token(last, *item.sampling, *item.rng) : argmax_token(last);
    if (item.logprobs >= 0) r.logprobs = token_logprobs(last, r.next, item.logprobs);
    if (item.prompt_logprobs)
      for (size_t i = 1; i < item.tokens.size(); ++i)
        r.prompt_logprobs.push_back(
            token_logprobs(rows.subspan((i - 1) * vocab, vocab), item.tokens[i], std::max(0, item.logprobs)));
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace hiq
