// model/rope.h — rotary position embeddings of the Qwen3 family: the inverse
// frequencies from rope_theta and, if the checkpoint asks for it, rope_scaling
// of type "llama3" or "yarn" (as Hugging Face transformers computes them).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace hiq {

struct RopeScaling {
  enum class Kind : uint8_t { kNone, kLlama3, kYarn };
  Kind kind = Kind::kNone;
  double factor = 1.0;                     // llama3, yarn
  double low_freq_factor = 1.0;            // llama3
  double high_freq_factor = 4.0;           // llama3
  int original_max_position_embeddings = 0;  // llama3, yarn (0: the config's max_position_embeddings)
  double beta_fast = 32.0, beta_slow = 1.0;  // yarn
  // yarn; 0: absent. As in transformers, the attention factor is their ratio
  // only when both are set (non-zero), else the default mscale of the factor.
  double mscale = 0.0, mscale_all_dim = 0.0;
  bool operator==(const RopeScaling&) const = default;
};

struct RopeTable {
  std::vector<float> inv_freq;  // head_dim / 2 inverse frequencies
  float attention_scale = 1.0f; // yarn multiplies cos and sin by this (1 otherwise)
};

// Errors: a head_dim that is not even and positive, a non-positive theta, or
// scaling parameters out of range.
Result<RopeTable> make_rope_table(int head_dim, double theta, const RopeScaling& scaling,
                                  int max_position_embeddings);

}  // namespace hiq
