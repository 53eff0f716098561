#include "memory/host_slot_allocator.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace hiq {

HostSlotAllocator::HostSlotAllocator(uint64_t granules, std::vector<uint32_t> spans)
    : spans_(std::move(spans)), extents_(granules), tags_(granules, kFree), used_(spans_.size(), 0) {
  HIQ_CHECK(!spans_.empty() && spans_.size() < kReleased && granules <= UINT32_MAX);
  for (uint32_t s : spans_) HIQ_CHECK(s > 0);
}

Result<std::vector<SlotId>> HostSlotAllocator::allocate(size_t n, int rung) {
  HIQ_CHECK(rung >= 0 && rung < rungs());
  const uint64_t span = this->span(rung);
  if (n > free_tokens(rung))
    return resource_exhausted("host tier: " + std::to_string(n) + " tokens asked, room for at most " +
                              std::to_string(free_tokens(rung)));
  // One run when one is long enough; otherwise the longest runs, each as
  // many whole tokens as it holds, until n are placed or none holds one.
  std::vector<std::pair<uint64_t, uint64_t>> runs;  // offset, tokens
  size_t placed = 0;
  while (placed < n) {
    const uint64_t tokens = std::min<uint64_t>(n - placed, extents_.largest_free_run() / span);
    if (tokens == 0) break;
    auto offset = extents_.allocate(tokens * span);
    HIQ_CHECK(offset.is_ok());
    runs.emplace_back(*offset, tokens);
    placed += tokens;
  }
  if (placed < n) {
    for (const auto& [offset, tokens] : runs) HIQ_CHECK(extents_.free(offset, tokens * span).is_ok());
    return resource_exhausted("host tier: " + std::to_string(n) + " tokens asked; the free space is in runs too " +
                              "short to hold more than " + std::to_string(placed));
  }
  std::vector<SlotId> slots;
  slots.reserve(n);
  for (const auto& [offset, tokens] : runs)
    for (uint64_t i = 0; i < tokens; ++i) {
      const auto slot = static_cast<SlotId>(offset + i * span);
      tags_[slot] = static_cast<uint8_t>(rung);
      slots.push_back(slot);
    }
  used_[static_cast<size_t>(rung)] += n;
  used_total_ += n;
  return slots;
}

Status HostSlotAllocator::check_owned(std::span<const SlotId> slots, const char* what) const {
  std::vector<SlotId> sorted(slots.begin(), slots.end());
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (!is_allocated(sorted[i]))
      return failed_precondition(std::string("host tier: ") + what + " slot " + std::to_string(sorted[i]) +
                                 ", which is not allocated");
    if (i > 0 && sorted[i] == sorted[i - 1])
      return failed_precondition(std::string("host tier: ") + what + " slot " + std::to_string(sorted[i]) + " twice");
  }
  return Status::ok();
}

void HostSlotAllocator::free_runs(std::span<const SlotId> slots) {
  std::vector<SlotId> sorted(slots.begin(), slots.end());
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size();) {
    const SlotId start = sorted[i];
    uint64_t end = start;
    for (; i < sorted.size() && sorted[i] == end; ++i) {
      end += span(tags_[sorted[i]]);
      tags_[sorted[i]] = kFree;
    }
    HIQ_CHECK(extents_.free(start, end - start).is_ok());
  }
}

Status HostSlotAllocator::free(std::span<const SlotId> slots) {
  HIQ_RETURN_IF_ERROR(check_owned(slots, "freeing"));
  std::vector<SlotId> now;
  now.reserve(slots.size());
  for (SlotId s : slots) {
    const uint8_t rung = tags_[s];
    --used_[rung];
    --used_total_;
    if (pins_.contains(s)) {
      released_.emplace(s, rung);
      tags_[s] = kReleased;
    } else {
      now.push_back(s);
    }
  }
  free_runs(now);
  return Status::ok();
}

Status HostSlotAllocator::pin(std::span<const SlotId> slots) {
  for (SlotId s : slots)
    if (!is_allocated(s)) return failed_precondition("host tier: pinning slot " + std::to_string(s) + ", not allocated");
  for (SlotId s : slots) ++pins_[s];
  return Status::ok();
}

Status HostSlotAllocator::unpin(std::span<const SlotId> slots) {
  std::unordered_map<SlotId, uint16_t> asked;
  for (SlotId s : slots) ++asked[s];
  for (const auto& [s, count] : asked) {
    const auto it = pins_.find(s);
    if (it == pins_.end() || it->second < count)
      return failed_precondition("host tier: unpinning slot " + std::to_string(s) + ", which has no pin");
  }
  for (const auto& [s, count] : asked) {
    auto it = pins_.find(s);
    it->second = static_cast<uint16_t>(it->second - count);
    if (it->second > 0) continue;
    pins_.erase(it);
    const auto released = released_.find(s);
    if (released == released_.end()) continue;
    tags_[s] = released->second;  // free_runs reads the span from the tag
    released_.erase(released);
    const SlotId one[] = {s};
    free_runs(one);
  }
  return Status::ok();
}

bool HostSlotAllocator::any_pinned(std::span<const SlotId> slots) const {
  if (pins_.empty()) return false;
  return std::any_of(slots.begin(), slots.end(), [&](SlotId s) { return pins_.contains(s); });
}

std::vector<SlotId> HostSlotAllocator::compacted(std::span<const SlotId> slots, uint32_t from_span, uint32_t to_span) {
  std::vector<SlotId> out(slots.size());
  SlotId run_start = 0;
  uint64_t in_run = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    const bool continues = i > 0 && uint64_t{slots[i]} == uint64_t{slots[i - 1]} + from_span;
    if (!continues) {
      run_start = slots[i];
      in_run = 0;
    }
    out[i] = static_cast<SlotId>(run_start + in_run * to_span);
    ++in_run;
  }
  return out;
}

Status HostSlotAllocator::shrink(std::span<const SlotId> slots, int to_rung) {
  if (slots.empty()) return Status::ok();
  HIQ_RETURN_IF_ERROR(check_owned(slots, "shrinking"));
  const int from_rung = tags_[slots[0]];
  if (to_rung <= from_rung || to_rung >= rungs() || span(to_rung) > span(from_rung))
    return failed_precondition("host tier: shrinking rung " + std::to_string(from_rung) + " slots to rung " +
                               std::to_string(to_rung));
  for (SlotId s : slots)
    if (tags_[s] != from_rung) return failed_precondition("host tier: shrinking slots of different rungs");
  if (any_pinned(slots)) return failed_precondition("host tier: shrinking pinned slots");
  const uint32_t from = span(from_rung), to = span(to_rung);
  const std::vector<SlotId> moved = compacted(slots, from, to);
  for (SlotId s : slots) tags_[s] = kFree;
  for (SlotId s : moved) tags_[s] = static_cast<uint8_t>(to_rung);
  // Each run now ends earlier: free from its last token's new end to its old end.
  for (size_t i = 0; i < slots.size(); ++i) {
    const bool last_of_run = i + 1 == slots.size() || uint64_t{slots[i + 1]} != uint64_t{slots[i]} + from;
    if (!last_of_run) continue;
    const uint64_t new_end = uint64_t{moved[i]} + to, old_end = uint64_t{slots[i]} + from;
    HIQ_CHECK(extents_.free(new_end, old_end - new_end).is_ok());
  }
  used_[static_cast<size_t>(from_rung)] -= slots.size();
  used_[static_cast<size_t>(to_rung)] += slots.size();
  return Status::ok();
}

Status HostSlotAllocator::check() const {
  HIQ_RETURN_IF_ERROR(extents_.check());
  std::vector<size_t> used(spans_.size(), 0);
  uint64_t granules = 0;
  for (size_t s = 0; s < tags_.size(); ++s) {
    const uint8_t tag = tags_[s];
    if (tag == kFree) continue;
    const int rung = tag == kReleased ? released_.at(static_cast<SlotId>(s)) : tag;
    if (tag != kReleased) ++used[static_cast<size_t>(rung)];
    const uint64_t end = s + span(rung);
    if (end > tags_.size() || !extents_.is_allocated(s) || !extents_.is_allocated(end - 1))
      return internal_error("host tier: slot " + std::to_string(s) + "'s granules are not all allocated");
    for (uint64_t g = s + 1; g < end; ++g)
      if (tags_[g] != kFree)
        return internal_error("host tier: slot " + std::to_string(g) + " inside slot " + std::to_string(s));
    granules += span(rung);
  }
  if (used != used_) return internal_error("host tier: per-rung token counts out of step with the tags");
  if (granules != extents_.used_count())
    return internal_error("host tier: allocated granules that no slot owns");
  for (const auto& [s, rung] : released_)
    if (tags_[s] != kReleased || !pins_.contains(s)) return internal_error("host tier: a released slot without a pin");
  return Status::ok();
}

}  // namespace hiq
