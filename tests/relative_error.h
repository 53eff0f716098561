// tests/relative_error.h — ‖a − b‖ / ‖b‖, the measure the model tests compare
// logits and KV rows by.
#pragma once

#include <cmath>
#include <span>

namespace hiq::testing {

inline double relative_error(std::span<const float> a, std::span<const float> b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    norm += double{b[i]} * b[i];
  }
  return std::sqrt(diff / norm);
}

}  // namespace hiq::testing
