#include "engine/cuda_model_runner.h"

#include <algorithm>

namespace hiq {

CudaModelRunner::CudaModelRunner(CudaModel& model, DeviceKvPool& l1, CudaTransferEngine* engine)
    : model_(&model), l1_(&l1), engine_(engine), start_(std::chrono::steady_clock::now()) {}

CudaModelRunner::CudaModelRunner(CudaTpModel& model, std::vector<DeviceKvPool*> pools, CudaTpTransferEngine* engine)
    : tp_(&model), pools_(std::move(pools)), tp_engine_(engine), start_(std::chrono::steady_clock::now()) {}

Result<ModelOutput> CudaModelRunner::run_model(std::span<const ModelSequence> sequences, LogitsWanted wanted,
                                               std::span<const Ticket> loads) {
  if (tp_ != nullptr) {
    const BeforeRankAttention wait_for_restores = [&](int rank, int layer, void* stream) -> Status {
      for (Ticket load : loads) HIQ_RETURN_IF_ERROR(tp_engine_->stream_wait_rank_layer(load, rank, layer, stream));
      return Status::ok();
    };
    return tp_->forward(pools_, sequences, wanted, loads.empty() ? BeforeRankAttention() : wait_for_restores);
  }
  const BeforeLayerAttention wait_for_restores = [&](int layer, void* stream) -> Status {
    for (Ticket load : loads) HIQ_RETURN_IF_ERROR(engine_->stream_wait_layer(load, layer, stream));
    return Status::ok();
  };
  return model_->forward(*l1_, sequences, wanted, loads.empty() ? BeforeLayerAttention() : wait_for_restores);
}

double CudaModelRunner::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

// One CudaModel pass over `batch`. Logits come back only as far as needed:
// none for an all-greedy batch, each item's last row when one samples or
// wants log-probabilities, every row for prompt log-probabilities (forward()
// gives such an item a pass of its own, so its [tokens][vocab] rows are the
// only ones brought back).
Result<std::vector<ForwardResult>> CudaModelRunner::run_pass(std::span<const ForwardItem> batch) {
  std::vector<ModelSequence> sequences;
  std::vector<Ticket> loads;
  sequences.reserve(batch.size());
  for (const ForwardItem& item : batch) {
    if (item.load) {
      if (!has_engine()) return failed_precondition("forward: a restore without a transfer engine");
      loads.push_back(*item.load);
    }
    if (item.prompt_logprobs && item.first_new != 0)
      return failed_precondition("forward: prompt log-probabilities need the whole prompt computed");
    sequences.push_back({item.tokens, item.slots, item.first_new});
  }
  const bool all = std::any_of(batch.begin(), batch.end(), [](const ForwardItem& i) { return i.prompt_logprobs; });
  const bool last = std::any_of(batch.begin(), batch.end(),
                                [](const ForwardItem& i) { return i.sampling != nullptr || i.logprobs >= 0; });
  const LogitsWanted wanted = all ? LogitsWanted::kAll : last ? LogitsWanted::kLast : LogitsWanted::kNone;
  HIQ_ASSIGN_OR_RETURN(ModelOutput out, run_model(sequences, wanted, loads));
  const auto vocab = static_cast<size_t>(shape().vocab_size);
  const std::span<const float> logits(out.logits);
  std::vector<ForwardResult> results(batch.size());
  size_t row = 0;  // the item's first logit row
  for (size_t i = 0; i < batch.size(); ++i) {
    const ForwardItem& item = batch[i];
    const size_t rows = wanted == LogitsWanted::kAll ? item.tokens.size() - item.first_new : 1;
    ForwardResult& r = results[i];
    r.next = out.next_tokens[i];
    if (wanted != LogitsWanted::kNone) {
      const std::span<const float> own = logits.subspan(row * vocab, rows * vocab);
      const std::span<const float> next_row = own.last(vocab);
      if (item.sampling != nullptr) r.next = sample_token(next_row, *item.sampling, *item.rng);
      if (item.logprobs >= 0) r.logprobs = token_logprobs(next_row, r.next, item.logprobs);
      if (item.prompt_logprobs)
        for (size_t t = 1; t < item.tokens.size(); ++t)
          r.prompt_logprobs.push_back(
              token_logprobs(own.subspan((t - 1) * vocab, vocab), item.tokens[t], std::max(0, item.logprobs)));
    }
    row += rows;
  }
  return results;
}

Result<std::vector<ForwardResult>> CudaModelRunner::forward(std::span<const ForwardItem> batch) {
  const auto wants_prompt = [](const ForwardItem& i) { return i.prompt_logprobs; };
  if (std::none_of(batch.begin(), batch.end(), wants_prompt)) return run_pass(batch);
  // Items that want every row's logits get a pass each; the rest share one.
  std::vector<ForwardItem> shared;
  std::vector<size_t> shared_index;
  std::vector<ForwardResult> results(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!batch[i].prompt_logprobs) {
      shared.push_back(batch[i]);
      shared_index.push_back(i);
      continue;
    }
    HIQ_ASSIGN_OR_RETURN(std::vector<ForwardResult> one, run_pass(batch.subspan(i, 1)));
    results[i] = std::move(one[0]);
  }
  if (!shared.empty()) {
    HIQ_ASSIGN_OR_RETURN(std::vector<ForwardResult> rest, run_pass(shared));
    for (size_t j = 0; j < rest.size(); ++j) results[shared_index[j]] = std::move(rest[j]);
  }
  return results;
}

}  // namespace hiq
