#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace hiq {

Status SamplingParams::validate() const {
  if (!(temperature >= 0.0f && temperature <= 2.0f)) return invalid_argument("temperature must be in [0, 2]");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return invalid_argument("top_p must be in (0, 1]");
  if (top_k == 0 || top_k < -1) return invalid_argument("top_k must be -1 (off) or at least 1");
  return Status::ok();
}

int32_t argmax_token(std::span<const float> logits) {
  int32_t best = 0;
  float best_value = -INFINITY;
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] > best_value) best_value = logits[i], best = static_cast<int32_t>(i);
  return best;
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& p, std::mt19937_64& rng) {
  if (p.greedy() || logits.empty()) return argmax_token(logits);
  // Candidates, most likely first: all of them, or the top k.
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const auto by_logit = [&](int32_t a, int32_t b) {
    const float x = logits[static_cast<size_t>(a)], y = logits[static_cast<size_t>(b)];
    return x > y || (x == y && a < b) || (std::isnan(y) && !std::isnan(x));
  };
  const size_t k = p.top_k > 0 ? std::min(order.size(), static_cast<size_t>(p.top_k)) : order.size();
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(), by_logit);
  order.resize(k);
  // Softmax of logit / temperature over the candidates, in double.
  const double top = logits[static_cast<size_t>(order[0])];
  if (!std::isfinite(top)) return order[0];
  std::vector<double> weight(k);
  double total = 0;
  for (size_t i = 0; i < k; ++i) {
    const double l = logits[static_cast<size_t>(order[i])];
    weight[i] = std::isnan(l) ? 0.0 : std::exp((l - top) / p.temperature);
    total += weight[i];
  }
  // Nucleus: the shortest prefix whose probability reaches top_p (at least one token).
  size_t keep = k;
  if (p.top_p < 1.0f) {
    double mass = 0;
    for (size_t i = 0; i < k; ++i) {
      mass += weight[i] / total;
      if (mass >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += weight[i];
  const double u = std::uniform_real_distribution<double>(0.0, kept)(rng);
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += weight[i];
    if (u < acc) return order[i];
  }
  return order[keep - 1];
}

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int top_n) {
  // log p(i) = logit(i) − log Σ exp(logit(j)), in double, shifted by the max.
  double top = -INFINITY;
  for (float l : logits)
    if (l > top) top = l;
  double sum = 0;
  if (std::isfinite(top))
    for (float l : logits)
      if (!std::isnan(l)) sum += std::exp(static_cast<double>(l) - top);
  const double log_total = std::isfinite(top) ? top + std::log(sum) : INFINITY;
  const auto logprob = [&](int32_t id) -> float {
    if (id < 0 || static_cast<size_t>(id) >= logits.size()) return -INFINITY;
    const float l = logits[static_cast<size_t>(id)];
    return std::isnan(l) || !std::isfinite(log_total) ? -INFINITY : static_cast<float>(l - log_total);
  };
  TokenLogprobs out;
  out.token = token;
  out.logprob = logprob(token);
  const size_t k = std::min(logits.size(), static_cast<size_t>(std::clamp(top_n, 0, kMaxTopLogprobs)));
  if (k == 0) return out;
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const auto by_logit = [&](int32_t a, int32_t b) {
    const float x = logits[static_cast<size_t>(a)], y = logits[static_cast<size_t>(b)];
    if (std::isnan(x) || std::isnan(y)) return !std::isnan(x) || (std::isnan(y) && a < b);
    return x > y || (x == y && a < b);
  };
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(), by_logit);
  out.top.reserve(k);
  for (size_t i = 0; i < k; ++i) out.top.emplace_back(order[i], logprob(order[i]));
  return out;
}

}  // namespace hiq
