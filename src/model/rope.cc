#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

namespace hiq {
namespace {

// The default inverse frequencies, in float32 as transformers computes them:
// theta ** (arange(0, dim, 2) / dim), then 1 / that.
std::vector<float> default_inv_freq(int head_dim, double theta) {
  std::vector<float> inv(static_cast<size_t>(head_dim / 2));
  for (size_t i = 0; i < inv.size(); ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(theta), exponent);
  }
  return inv;
}

// Llama 3.1: frequencies with wavelengths longer than the original context
// divided by `factor`, shorter ones kept, those between blended smoothly.
void apply_llama3(std::vector<float>& inv, const RopeScaling& s, int max_positions) {
  const double old_context = s.original_max_position_embeddings > 0 ? s.original_max_position_embeddings : max_positions;
  const double low_freq_wavelen = old_context / s.low_freq_factor;
  const double high_freq_wavelen = old_context / s.high_freq_factor;
  for (float& f : inv) {
    const double wavelen = 2 * std::numbers::pi / f;
    if (wavelen > low_freq_wavelen) {
      f = static_cast<float>(f / s.factor);
    } else if (wavelen >= high_freq_wavelen) {
      const double smooth = (old_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = static_cast<float>((1 - smooth) * f / s.factor + smooth * f);
    }
  }
}

double yarn_mscale(double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }

// YaRN: interpolate low frequencies by `factor`, extrapolate high ones, ramp
// between the dimensions that rotate beta_fast and beta_slow times over the
// original context; cos and sin are scaled by the attention factor.
void apply_yarn(std::vector<float>& inv, float& attention_scale, int head_dim, double theta, const RopeScaling& s,
                int max_positions) {
  const double original = s.original_max_position_embeddings > 0 ? s.original_max_position_embeddings : max_positions;
  const auto correction_dim = [&](double rotations) {
    return head_dim * std::log(original / (rotations * 2 * std::numbers::pi)) / (2 * std::log(theta));
  };
  double low = std::max(0.0, std::floor(correction_dim(s.beta_fast)));
  double high = std::min(static_cast<double>(head_dim - 1), std::ceil(correction_dim(s.beta_slow)));
  if (low == high) high += 0.001;  // no division by zero in the ramp
  const std::vector<float> extrapolation = inv;
  for (size_t i = 0; i < inv.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_weight = 1.0 - ramp;
    const double interpolation = extrapolation[i] / s.factor;
    inv[i] = static_cast<float>(interpolation * (1 - extrapolation_weight) + extrapolation[i] * extrapolation_weight);
  }
  attention_scale = static_cast<float>(s.mscale > 0 && s.mscale_all_dim > 0
                                           ? yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim)
                                           : yarn_mscale(s.factor, 1.0));
}

}  // namespace

Result<RopeTable> make_rope_table(int head_dim, double theta, const RopeScaling& scaling, int max_position_embeddings) {
  if (head_dim <= 0 || head_dim % 2 != 0)
    return invalid_argument("rotary embeddings need an even, positive head_dim (got " + std::to_string(head_dim) + ")");
  if (!(theta > 1.0)) return invalid_argument("rope_theta must be greater than 1");
  RopeTable table;
  table.inv_freq = default_inv_freq(head_dim, theta);
  switch (scaling.kind) {
    case RopeScaling::Kind::kNone:
      break;
    case RopeScaling::Kind::kLlama3:
      if (!(scaling.factor >= 1.0) || !(scaling.high_freq_factor > scaling.low_freq_factor) ||
          !(scaling.low_freq_factor > 0))
        return invalid_argument(
            "rope_scaling llama3 needs factor ≥ 1 and 0 < low_freq_factor < high_freq_factor");
      if (scaling.original_max_position_embeddings <= 0 && max_position_embeddings <= 0)
        return invalid_argument("rope_scaling llama3 needs original_max_position_embeddings");
      apply_llama3(table.inv_freq, scaling, max_position_embeddings);
      break;
    case RopeScaling::Kind::kYarn:
      if (!(scaling.factor >= 1.0) || !(scaling.beta_fast > scaling.beta_slow) || !(scaling.beta_slow > 0))
        return invalid_argument("rope_scaling yarn needs factor ≥ 1 and beta_fast > beta_slow > 0");
      if (scaling.original_max_position_embeddings <= 0 && max_position_embeddings <= 0)
        return invalid_argument("rope_scaling yarn needs original_max_position_embeddings");
      apply_yarn(table.inv_freq, table.attention_scale, head_dim, theta, scaling, max_position_embeddings);
      break;
  }
  return table;
}

}  // namespace hiq
