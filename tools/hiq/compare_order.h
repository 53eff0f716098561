// tools/hiq/compare_order.h — the order in which `hiq bench serve --compare`
// runs its configurations, repeat by repeat.
//
// Repeats come in pairs: forward, then backward, so a drift of the machine
// over time (clocks, page cache, allocator state) weighs on every pair of
// configurations alike. Each pair also starts one configuration later than
// the one before, so no configuration keeps one place: over 2n repeats of n
// configurations, every configuration runs at every position exactly twice.
// (Forward and backward alone would keep the middle of an odd count in the
// middle for ever, and never first after a change of configuration.)
#pragma once

#include <cstddef>

namespace hiq::cli {

// The index of the configuration that runs at `position` (0 ≤ position < n)
// of repeat `repeat`, among `n` configurations.
constexpr size_t compare_run_index(size_t repeat, size_t position, size_t n) {
  const size_t start = (repeat / 2) % n;
  const size_t step = repeat % 2 == 0 ? position : n - 1 - position;
  return (start + step) % n;
}

}  // namespace hiq::cli
