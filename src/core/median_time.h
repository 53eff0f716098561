// core/median_time.h — the timing rule every benchmark shares: the median of
// repeated runs after a warm-up, host clock around work that has finished.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/status.h"

namespace hiq {

// Median seconds of `run()` (a callable returning Status that finishes its GPU
// work before returning), after one warm-up run: at least `min_runs` runs,
// more while `budget` seconds last, at most 200.
template <typename Run>
Result<double> median_seconds(double budget, Run run, size_t min_runs = 3) {
  using Clock = std::chrono::steady_clock;
  HIQ_RETURN_IF_ERROR(run());
  std::vector<double> times;
  const auto begin = Clock::now();
  while (times.size() < min_runs ||
         (times.size() < 200 && std::chrono::duration<double>(Clock::now() - begin).count() < budget)) {
    const auto t0 = Clock::now();
    HIQ_RETURN_IF_ERROR(run());
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

}  // namespace hiq
