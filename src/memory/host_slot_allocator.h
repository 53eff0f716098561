// memory/host_slot_allocator.h — hands out the slots of the host tier (L2).
//
// The host tier's region is counted in granules; a token's records are one
// run of them, span(rung) granules long, and its slot is the run's first
// granule. A pool of one codec has one rung whose span is 1 granule (a
// granule is then one token's records); a precision-tiered pool has one rung
// per codec of its ladder, each token taking as many granules as its codec
// needs (memory/host_kv_pool.h). Allocation is all-or-nothing: n tokens get
// n slots, in as few runs as the free space allows, or none.
//
// Slot lifecycle, as memory/slot_allocator.h's (a reader off the owner's
// thread may pin slots; the owner's free() of a pinned slot releases it to
// its last unpin):
//
//   free ──allocate──▶ allocated ──free()──▶ free
//   allocated ──pin()──▶ pinned ──free()──▶ released ──last unpin()──▶ free
//   allocated ──shrink()──▶ allocated at a lower rung, in place, its tail free
//
// shrink() is the demotion of a node's records to a smaller codec: each
// run of the node's slots is compacted to its start (compacted() says where
// each token goes), and what the tokens no longer need is freed.
//
// Not thread-safe: the cache owns it and serialises access.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "memory/extent_allocator.h"
#include "memory/slot_allocator.h"

namespace hiq {

class HostSlotAllocator {
 public:
  // `spans[r]`: the granules a token of rung r takes (> 0). Slots are granule
  // offsets, so the region must have fewer than 2^32 granules.
  HostSlotAllocator(uint64_t granules, std::vector<uint32_t> spans);

  int rungs() const { return static_cast<int>(spans_.size()); }
  uint32_t span(int rung) const { return spans_[static_cast<size_t>(rung)]; }
  uint64_t granules() const { return extents_.capacity(); }
  uint64_t free_granules() const { return extents_.free_count(); }
  // Tokens allocated and not freed, of any rung or of one (pinned ones count
  // until freed; released ones do not).
  size_t used_tokens() const { return used_total_; }
  size_t used_tokens(int rung) const { return used_[static_cast<size_t>(rung)]; }
  // Tokens of `rung` the free granules would hold without fragmentation: an
  // upper bound on what allocate() can hand out.
  size_t free_tokens(int rung = 0) const { return free_granules() / span(rung); }
  size_t released_pinned_count() const { return released_.size(); }

  // `n` slots of `rung`; kResourceExhausted, taking none, when the free runs
  // cannot hold them.
  Result<std::vector<SlotId>> allocate(size_t n, int rung = 0);
  // kFailedPrecondition, freeing none, when any slot is not allocated or is
  // listed twice.
  Status free(std::span<const SlotId> slots);
  bool is_allocated(SlotId slot) const { return slot < tags_.size() && tags_[slot] < kReleased; }
  // The rung of an allocated slot; -1 otherwise.
  int rung_of(SlotId slot) const { return is_allocated(slot) ? tags_[slot] : -1; }

  Status pin(std::span<const SlotId> slots);
  Status unpin(std::span<const SlotId> slots);
  bool any_pinned(std::span<const SlotId> slots) const;

  // Where shrink() moves each of `slots` (all of one rung, in token order)
  // when they go from `from_span` to `to_span` granules: each run of slots
  // adjacent in memory keeps its start and packs its tokens to it, so token
  // j's new records never reach past its old ones' end, nor into a later
  // token's.
  static std::vector<SlotId> compacted(std::span<const SlotId> slots, uint32_t from_span, uint32_t to_span);
  // Moves `slots` (allocated, of one rung above `to_rung`, none pinned) to
  // compacted() slots of `to_rung`, freeing what they no longer take.
  // kFailedPrecondition, changing nothing, when the slots do not qualify.
  Status shrink(std::span<const SlotId> slots, int to_rung);

  // The tags agree with the extents and the counts; the first violation.
  Status check() const;

 private:
  static constexpr uint8_t kFree = 0xFF, kReleased = 0xFE;  // tags of slots that are not allocated
  Status check_owned(std::span<const SlotId> slots, const char* what) const;
  void free_runs(std::span<const SlotId> slots);  // allocated, unpinned slots: back to the extents

  std::vector<uint32_t> spans_;
  ExtentAllocator extents_;
  std::vector<uint8_t> tags_;  // per granule: the rung of the token whose slot it is, or kFree / kReleased
  std::unordered_map<SlotId, uint16_t> pins_;
  std::unordered_map<SlotId, uint8_t> released_;  // freed while pinned: slot → rung
  std::vector<size_t> used_;                       // per rung
  size_t used_total_ = 0;
};

}  // namespace hiq
