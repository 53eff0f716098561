// engine/model_runner.h — what the scheduler asks of a model: compute the KV
// of new tokens (reading the cached prefix) and produce the next token.
//
// Two implementations share the scheduler: SimRunner (synthetic KV, a virtual
// clock and a self-check on every read) and, later, the real Qwen3 runtime.
#pragma once

#include <optional>
#include <random>
#include <span>
#include <vector>

#include "cache/radix_cache.h"
#include "core/status.h"
#include "engine/sampler.h"
#include "transfer/transfer_engine.h"

namespace hiq {

// One sequence in a forward pass.
struct ForwardItem {
  std::span<const TokenId> tokens;   // the whole sequence so far (prompt, then generated tokens)
  std::span<const SlotId> slots;     // an L1 slot for each token of `tokens`
  size_t first_new = 0;              // tokens[first_new..] get their KV computed; the rest is read
  // Slots [restored_begin, restored_end) were restored from L2 by `load`:
  // attention on layer i may read them only after wait_layer(load, i).
  size_t restored_begin = 0, restored_end = 0;
  std::optional<Ticket> load;
  bool decode = false;               // a decode step (one new token) rather than a prefill
  // How to choose the next token: greedy when null. A model runner draws
  // from `rng` (the request's own stream); the simulator ignores both.
  const SamplingParams* sampling = nullptr;
  std::mt19937_64* rng = nullptr;
  // -1: no log-probabilities; k ≥ 0: the chosen next token's, with the k most
  // likely alternatives (k ≤ kMaxTopLogprobs).
  int logprobs = -1;
  // Also every prompt token's log-probability given the tokens before it
  // (with `logprobs` alternatives, at least 0): needs first_new == 0, since
  // the logits of cached positions are never computed.
  bool prompt_logprobs = false;
};

// What a forward pass gives back for one item.
struct ForwardResult {
  TokenId next = 0;                            // the next token, as the item's sampling chose it
  std::optional<TokenLogprobs> logprobs;       // of `next`, when the item asked (logprobs ≥ 0)
  std::vector<TokenLogprobs> prompt_logprobs;  // of tokens[1..], when the item asked (prompt_logprobs)
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  // Computes the KV of every item's new tokens into their slots and returns,
  // per item, the next token (as its sampling parameters choose it) and the
  // log-probabilities it asked for. A runner without logits (the simulator)
  // leaves them out. A failed restore (the load ticket's error) or a failed
  // self-check is returned as an error: the scheduler recomputes.
  virtual Result<std::vector<ForwardResult>> forward(std::span<const ForwardItem> batch) = 0;
  // The runner's clock, in seconds: virtual for the simulator, wall for a model.
  virtual double now() const = 0;
  // Advances the clock to `t` if it is behind (idle time between arrivals).
  virtual void advance_to(double t) = 0;
  // The scheduler blocked until cache transfers carrying `tokens` tokens
  // settled (L1 eviction waiting for backups). A model's wall clock has
  // already spent that time; the simulator charges it.
  virtual void waited_for_transfers(size_t tokens) { (void)tokens; }
};

}  // namespace hiq
