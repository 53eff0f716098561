#include "memory/extent_allocator.h"

#include <iterator>
#include <string>

namespace hiq {

ExtentAllocator::ExtentAllocator(uint64_t capacity) : capacity_(capacity), free_(capacity) {
  if (capacity > 0) insert_free(0, capacity);
}

uint64_t ExtentAllocator::largest_free_run() const { return by_length_.empty() ? 0 : by_length_.rbegin()->first; }

void ExtentAllocator::insert_free(Offset offset, uint64_t length) {
  by_offset_.emplace(offset, length);
  by_length_.emplace(length, offset);
}

void ExtentAllocator::erase_free(std::map<Offset, uint64_t>::iterator it) {
  by_length_.erase({it->second, it->first});
  by_offset_.erase(it);
}

Result<ExtentAllocator::Offset> ExtentAllocator::allocate(uint64_t length) {
  if (length == 0) return invalid_argument("extent allocator: a run of 0 granules");
  const auto fit = by_length_.lower_bound({length, 0});
  if (fit == by_length_.end())
    return resource_exhausted("extent allocator: no free run of " + std::to_string(length) + " granules (" +
                              std::to_string(free_) + " free, the longest run " +
                              std::to_string(largest_free_run()) + ")");
  const auto [run_length, offset] = *fit;
  erase_free(by_offset_.find(offset));
  if (run_length > length) insert_free(offset + length, run_length - length);
  allocated_.emplace(offset, length);
  free_ -= length;
  return offset;
}

Status ExtentAllocator::free(Offset offset, uint64_t length) {
  if (length == 0) return Status::ok();
  const auto refuse = [&](const std::string& why) {
    return failed_precondition("extent allocator: freeing [" + std::to_string(offset) + ", " +
                               std::to_string(offset + length) + "): " + why);
  };
  if (offset + length < offset || offset + length > capacity_) return refuse("past the region");
  // The allocated runs that cover the range: the last one starting at or
  // before `offset`, then each one starting where the previous one ends.
  auto first = allocated_.upper_bound(offset);
  if (first == allocated_.begin()) return refuse("not allocated");
  --first;
  const Offset end = offset + length;
  auto last = first;
  for (Offset covered = first->first + first->second; covered < end; covered = last->first + last->second) {
    last = std::next(last);
    if (last == allocated_.end() || last->first != covered) return refuse("not all of it is allocated");
  }
  if (first->first + first->second <= offset) return refuse("not allocated");
  // What of those runs stays allocated: the parts before and after the range.
  const Offset head = first->first, tail_end = last->first + last->second;
  allocated_.erase(first, std::next(last));
  if (head < offset) allocated_.emplace(head, offset - head);
  if (end < tail_end) allocated_.emplace(end, tail_end - end);
  free_ += length;

  Offset merged = offset;
  uint64_t merged_length = length;
  auto next = by_offset_.lower_bound(offset);
  if (next != by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      merged = prev->first;
      merged_length += prev->second;
      erase_free(prev);
    }
  }
  next = by_offset_.lower_bound(offset);
  if (next != by_offset_.end() && next->first == offset + length) {
    merged_length += next->second;
    erase_free(next);
  }
  insert_free(merged, merged_length);
  return Status::ok();
}

bool ExtentAllocator::is_allocated(Offset offset) const {
  auto run = allocated_.upper_bound(offset);
  if (run == allocated_.begin()) return false;
  --run;
  return offset < run->first + run->second;
}

Status ExtentAllocator::check() const {
  if (by_offset_.size() != by_length_.size()) return internal_error("extent allocator: the free indexes disagree");
  uint64_t free_total = 0, used_total = 0;
  Offset end = 0;
  bool first = true;
  for (const auto& [offset, length] : by_offset_) {
    if (length == 0 || !by_length_.contains({length, offset}))
      return internal_error("extent allocator: free run at " + std::to_string(offset) + " is not indexed by length");
    if (!first && offset <= end)
      return internal_error("extent allocator: free runs overlap or touch at " + std::to_string(offset) +
                            " (not coalesced)");
    if (offset + length > capacity_) return internal_error("extent allocator: a free run passes the end");
    end = offset + length;
    first = false;
    free_total += length;
  }
  Offset allocated_end = 0;
  for (const auto& [offset, length] : allocated_) {
    if (length == 0 || offset + length > capacity_) return internal_error("extent allocator: a bad allocated run");
    if (offset < allocated_end)
      return internal_error("extent allocator: allocated runs overlap at " + std::to_string(offset));
    allocated_end = offset + length;
    auto f = by_offset_.upper_bound(offset);
    if (f != by_offset_.begin() && std::prev(f)->first + std::prev(f)->second > offset)
      return internal_error("extent allocator: allocated run at " + std::to_string(offset) + " overlaps a free one");
    if (f != by_offset_.end() && f->first < offset + length)
      return internal_error("extent allocator: allocated run at " + std::to_string(offset) + " overlaps a free one");
    used_total += length;
  }
  if (free_total != free_) return internal_error("extent allocator: free runs do not add up to free_count()");
  if (free_total + used_total != capacity_)
    return internal_error("extent allocator: free and allocated granules do not add up to the capacity");
  return Status::ok();
}

}  // namespace hiq
