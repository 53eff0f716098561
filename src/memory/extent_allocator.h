// memory/extent_allocator.h — runs of granules in one region, of any length.
//
// The precision-tiered host tier keeps tokens of different codecs in one
// region: an int8 token takes more bytes than an int4h one, and demoting a
// node frees its int8 runs and takes int4h runs. The region is counted in
// granules (a few dozen bytes: every codec's bytes per token is a whole
// number of them), and a token's records are one run (token-major order,
// memory/host_kv_pool.h).
//
// Best fit: a request takes the smallest free run that holds it (the lowest
// such run on a tie), so large runs are split last. Frees coalesce with
// their free neighbours, and may return part of an allocated run (a radix
// node split in two frees its halves apart). The two bugs that corrupt a
// cache silently — handing out a granule twice and freeing one that is not
// allocated — are reported as errors and change nothing.
//
// Not thread-safe: the cache owns it and serialises access.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <utility>

#include "core/status.h"

namespace hiq {

class ExtentAllocator {
 public:
  using Offset = uint64_t;  // in granules

  explicit ExtentAllocator(uint64_t capacity);

  uint64_t capacity() const { return capacity_; }
  uint64_t free_count() const { return free_; }
  uint64_t used_count() const { return capacity_ - free_; }
  // The longest run allocate() could hand out now (0 when full).
  uint64_t largest_free_run() const;
  // Free runs (after coalescing): a measure of fragmentation.
  size_t free_runs() const { return by_offset_.size(); }

  // A run of `length` (> 0) granules. kResourceExhausted, taking nothing,
  // when no free run is that long (even if as many granules are free).
  Result<Offset> allocate(uint64_t length);
  // Returns [offset, offset + length), every granule of which allocate()
  // handed out and is not yet freed (the range may cover parts of several
  // adjacent runs). kFailedPrecondition, changing nothing, otherwise.
  Status free(Offset offset, uint64_t length);
  bool is_allocated(Offset offset) const;

  // Checks that the free runs are disjoint, coalesced, inside the region and
  // add up to free_count() with the allocated granules; the first violation.
  Status check() const;

 private:
  void insert_free(Offset offset, uint64_t length);
  void erase_free(std::map<Offset, uint64_t>::iterator it);

  uint64_t capacity_;
  uint64_t free_;
  std::map<Offset, uint64_t> by_offset_;           // free runs: offset → length
  std::set<std::pair<uint64_t, Offset>> by_length_;  // the same runs: (length, offset)
  std::map<Offset, uint64_t> allocated_;           // allocated runs: offset → length
};

}  // namespace hiq
