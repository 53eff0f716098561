#include "memory/slot_allocator.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace hiq {

SlotAllocator::SlotAllocator(size_t capacity) : allocated_(capacity, false) {
  free_.reserve(capacity);
  for (size_t i = capacity; i > 0; --i) free_.push_back(static_cast<SlotId>(i - 1));
}

Result<std::vector<SlotId>> SlotAllocator::allocate(size_t n) {
  if (n > free_.size())
    return resource_exhausted("need " + std::to_string(n) + " slots, " + std::to_string(free_.size()) + " of " +
                              std::to_string(capacity()) + " are free");
  std::vector<SlotId> out(free_.end() - static_cast<std::ptrdiff_t>(n), free_.end());
  free_.resize(free_.size() - n);
  std::reverse(out.begin(), out.end());
  for (SlotId s : out) {
    HIQ_CHECK_MSG(!allocated_[s], "a slot on the free list is allocated");
    allocated_[s] = true;
  }
  return out;
}

Status SlotAllocator::free(std::span<const SlotId> slots) {
  // Clear each slot's bit as it is checked (so a slot listed twice is caught);
  // on the first bad slot, set back the bits cleared so far and change nothing.
  for (size_t i = 0; i < slots.size(); ++i) {
    const SlotId s = slots[i];
    Status bad;
    if (s >= capacity()) {
      bad = failed_precondition("free of slot " + std::to_string(s) + ", beyond the pool's " +
                                std::to_string(capacity()) + " slots");
    } else if (!allocated_[s]) {
      bad = failed_precondition("double free of slot " + std::to_string(s));
    }
    if (!bad.is_ok()) {
      for (size_t j = 0; j < i; ++j) allocated_[slots[j]] = true;
      return bad;
    }
    allocated_[s] = false;
  }
  free_.insert(free_.end(), slots.begin(), slots.end());
  return Status::ok();
}

}  // namespace hiq
