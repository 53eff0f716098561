// memory/slot_allocator.h — hands out the slots of a KV pool.
//
// A slot holds one token's KV (all layers, K and V) in a pool. Slots are the
// integers [0, capacity). The allocator is all-or-nothing (a request for n slots
// gets n or none) and catches the two bugs that corrupt a cache silently:
// allocating a slot twice and freeing a slot that is not allocated. Both are
// reported as errors and leave the allocator unchanged.
//
// Slot lifecycle: free → allocated (owned by exactly one request or radix node)
// → free. A reader off the owner's thread (the storage tier writing L2
// records to L3) may pin allocated slots: while a slot is pinned, its owner's
// free() ends the ownership at once but the slot becomes free only when the
// last pin is released, so what the reader copies stays intact:
//
//   allocated ──free()──▶ free
//   allocated ──pin()──▶ allocated + pinned ──free()──▶ released (neither
//   owned nor free) ──unpin() of the last pin──▶ free
//
// Not thread-safe: the cache owns it and serialises access.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace hiq {

using SlotId = uint32_t;

class SlotAllocator {
 public:
  explicit SlotAllocator(size_t capacity);

  size_t capacity() const { return allocated_.size(); }
  size_t free_count() const { return free_.size(); }
  size_t used_count() const { return capacity() - free_count(); }
  // Slots freed by their owner that pins still keep from the free list.
  size_t released_pinned_count() const { return released_pinned_; }

  // `n` slots, lowest first on a fresh allocator; kResourceExhausted (and no
  // slot taken) when fewer than n are free.
  Result<std::vector<SlotId>> allocate(size_t n);

  // Returns slots to the pool. kFailedPrecondition, freeing none of them, when
  // any slot is out of range, not allocated, or listed twice.
  Status free(std::span<const SlotId> slots);

  bool is_allocated(SlotId slot) const { return slot < capacity() && allocated_[slot]; }

  // Pins allocated slots (a slot may be pinned more than once).
  // kFailedPrecondition, pinning none, when any is out of range or not allocated.
  Status pin(std::span<const SlotId> slots);
  // Drops one pin of each slot; a slot its owner freed meanwhile becomes free
  // with its last pin. kFailedPrecondition, changing nothing, when any slot
  // has no pin.
  Status unpin(std::span<const SlotId> slots);

 private:
  std::vector<SlotId> free_;   // a stack: recently freed slots are reused first (warm in cache)
  std::vector<bool> allocated_;
  std::vector<uint16_t> pins_;  // per slot
  size_t released_pinned_ = 0;
};

}  // namespace hiq
