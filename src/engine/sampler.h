// engine/sampler.h — choosing the next token from a row of logits: greedy, or
// temperature sampling restricted by top-k and top-p, as OpenAI-style APIs
// expose them.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "core/status.h"

namespace hiq {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax); otherwise logits / temperature, in (0, 2]
  float top_p = 1.0f;        // keep the smallest set of most likely tokens whose probability reaches top_p, (0, 1]
  int top_k = -1;            // keep the k most likely tokens; -1: all
  uint64_t seed = 0;         // the request's random stream (the same seed, the same samples)

  bool greedy() const { return temperature == 0.0f || top_k == 1; }
  // Errors name the OpenAI parameter.
  Status validate() const;
};

// The argmax of `logits` (the first on ties; NaN never wins).
int32_t argmax_token(std::span<const float> logits);

// The next token under `params`, drawing from `rng` unless greedy.
int32_t sample_token(std::span<const float> logits, const SamplingParams& params, std::mt19937_64& rng);

// The most alternatives a caller may ask for at one position (vLLM's and
// OpenAI's limit for chat's top_logprobs).
inline constexpr int kMaxTopLogprobs = 20;

// What the model thought of one position: the log-probability of the token
// that stands there (sampled, or given in a prompt) and of the most likely
// tokens. Log-probabilities are of the model's own distribution — the log
// softmax of the raw logits, before temperature, top-k or top-p — as vLLM and
// SGLang report them by default.
struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // most likely first; ties: the lower id first
};

// The log-probabilities of `token` and of the `top_n` most likely tokens
// (0 ≤ top_n ≤ kMaxTopLogprobs) under `logits`. NaN logits count as -inf; a
// row with no finite logit gives -inf for every token.
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int top_n);

}  // namespace hiq
