#include "memory/mapped_region.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "core/units.h"

namespace hiq {

MappedRegion::~MappedRegion() {
  if (data_) munmap(data_, size_);
}

MappedRegion::MappedRegion(MappedRegion&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedRegion& MappedRegion::operator=(MappedRegion&& other) noexcept {
  if (this != &other) {
    if (data_) munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

Result<uint64_t> available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t value = 0;
  std::string unit;
  while (meminfo >> key >> value >> unit) {
    if (key == "MemAvailable:") return value * 1024;  // reported in kB
  }
  return unavailable("/proc/meminfo has no MemAvailable");
}

Result<MappedRegion> MappedRegion::reserve(size_t bytes, bool populate) {
  if (bytes == 0) return MappedRegion();
  if (auto available = available_memory_bytes(); available.is_ok() && bytes > *available)
    return resource_exhausted("cannot reserve " + format_bytes(bytes) + " of host memory: only " +
                              format_bytes(*available) + " is available");
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED)
    return resource_exhausted("cannot map " + format_bytes(bytes) + " of host memory: " + std::strerror(errno));
  return MappedRegion(static_cast<std::byte*>(p), bytes);
}

}  // namespace hiq
