#include "memory/slot_allocator.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace hiq {

SlotAllocator::SlotAllocator(size_t capacity) : allocated_(capacity, false), pins_(capacity, 0) {
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
  for (SlotId s : slots) {
    if (pins_[s] == 0) free_.push_back(s);
    else ++released_pinned_;
  }
  return Status::ok();
}

Status SlotAllocator::pin(std::span<const SlotId> slots) {
  for (SlotId s : slots) {
    if (s >= capacity()) return failed_precondition("pin of slot " + std::to_string(s) + ", beyond the pool");
    if (!allocated_[s]) return failed_precondition("pin of slot " + std::to_string(s) + ", which is not allocated");
    if (pins_[s] == UINT16_MAX) return failed_precondition("slot " + std::to_string(s) + " is pinned too often");
  }
  for (SlotId s : slots) ++pins_[s];
  return Status::ok();
}

Status SlotAllocator::unpin(std::span<const SlotId> slots) {
  // Drop the pins as they are checked (a slot listed twice needs two); on the
  // first bad slot, put back what was dropped and freed so far.
  const size_t free_before = free_.size(), released_before = released_pinned_;
  for (size_t i = 0; i < slots.size(); ++i) {
    const SlotId s = slots[i];
    if (s >= capacity() || pins_[s] == 0) {
      for (size_t j = 0; j < i; ++j) ++pins_[slots[j]];
      free_.resize(free_before);
      released_pinned_ = released_before;
      return failed_precondition("unpin of slot " + std::to_string(s) +
                                 (s >= capacity() ? ", beyond the pool" : ", which is not pinned"));
    }
    if (--pins_[s] == 0 && !allocated_[s]) {
      free_.push_back(s);
      --released_pinned_;
    }
  }
  return Status::ok();
}

}  // namespace hiq
