// engine/sampler.h — choosing the next token from a row of logits: greedy, or
// temperature sampling restricted by top-k and top-p, as OpenAI-style APIs
// expose them.
#pragma once

#include <cstdint>
#include <random>
#include <span>

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

}  // namespace hiq
