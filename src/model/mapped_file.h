// model/mapped_file.h — a read-only memory map of a whole file.
//
// Checkpoints are mapped, not read: the weights of an 8B model are 16 GB, and
// the page cache already holds them after the first load. The map is private
// and read-only, so nothing we do can change the file.
//
// A file truncated by someone else *after* it was mapped makes reads past the
// new end raise SIGBUS; that is the usual contract of mmap and nothing a reader
// can check cheaply. Truncation before open is caught by the format checks.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "core/status.h"

namespace hiq {

class MappedFile {
 public:
  MappedFile() = default;  // maps nothing; bytes() is empty
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  // Errors: kNotFound when the file does not exist, kInvalidArgument when it is
  // not a regular file, kDataLoss when it cannot be opened, sized or mapped.
  // An empty file maps to an empty span.
  static Result<MappedFile> open(const std::string& path);

  // Valid until the MappedFile is destroyed; moving it keeps the address.
  std::span<const std::byte> bytes() const { return {data_, size_}; }

 private:
  MappedFile(const std::byte* data, size_t size) : data_(data), size_(size) {}
  void unmap();

  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace hiq
