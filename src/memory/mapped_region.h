// memory/mapped_region.h — an anonymous memory mapping owned by RAII.
//
// The host tier reserves its whole budget at start: a budget the machine cannot
// hold must fail then, with a message, not later as an OOM kill in the middle
// of serving. So `reserve` checks the request against MemAvailable and, when
// asked to populate, touches every page up front (MAP_POPULATE).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace hiq {

class MappedRegion {
 public:
  MappedRegion() = default;
  ~MappedRegion();
  MappedRegion(MappedRegion&& other) noexcept;
  MappedRegion& operator=(MappedRegion&& other) noexcept;
  MappedRegion(const MappedRegion&) = delete;
  MappedRegion& operator=(const MappedRegion&) = delete;

  // Maps `bytes` of zeroed memory. kResourceExhausted when the machine's
  // available memory (MemAvailable) is smaller, or the mapping fails.
  static Result<MappedRegion> reserve(size_t bytes, bool populate);

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedRegion(std::byte* data, size_t size) : data_(data), size_(size) {}
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// MemAvailable from /proc/meminfo, in bytes; kUnavailable where there is none.
Result<uint64_t> available_memory_bytes();

}  // namespace hiq
