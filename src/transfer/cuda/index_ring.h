// transfer/cuda/index_ring.h (internal) — staging for the slot lists of queued
// transfers: pinned host memory the CPU fills, mirrored by device memory the
// kernels read (one cudaMemcpyAsync per operation, on the operation's stream).
//
// Regions are handed out and released in FIFO order, the order in which one
// stream completes its work, so the ring never reuses memory that queued work
// still reads: the caller releases a region only once its operation's
// completion event has fired. When a request does not fit, the ring grows into
// a new, larger buffer; the old one stays alive (shared by the regions still
// in it) and is freed when its last region is released. Not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>

#include "cuda/buffers.h"

namespace hiq::cuda {

class IndexRing {
 public:
  struct Region {
    uint32_t* host = nullptr;
    uint32_t* device = nullptr;
  };

  // A region of `n` (≥ 1) elements after every live one.
  Result<Region> acquire(size_t n);
  // Releases the oldest live region.
  void release_oldest();

  size_t capacity() const { return current_ ? current_->capacity : 0; }
  size_t buffers_alive() const;  // the current one and any older still in use

 private:
  static constexpr size_t kInitialElements = 16384;
  struct Buffer {
    PinnedMemory host;
    DeviceMemory device;
    size_t capacity = 0;  // elements
  };
  struct Live {
    std::shared_ptr<Buffer> buffer;
    size_t offset = 0, size = 0;
  };

  std::shared_ptr<Buffer> current_;
  size_t head_ = 0;  // end of the newest region in current_
  std::deque<Live> live_;
};

}  // namespace hiq::cuda
