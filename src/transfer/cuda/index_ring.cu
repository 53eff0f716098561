#include "transfer/cuda/index_ring.h"

#include <algorithm>
#include <optional>
#include <set>

namespace hiq::cuda {

Result<IndexRing::Region> IndexRing::acquire(size_t n) {
  n = std::max<size_t>(n, 1);
  std::optional<size_t> offset;
  if (current_) {
    const size_t cap = current_->capacity;
    // Regions of older buffers precede those of the current one (FIFO), so the
    // first live region in current_ is its tail.
    const auto oldest = std::find_if(live_.begin(), live_.end(), [&](const Live& l) { return l.buffer == current_; });
    if (oldest == live_.end()) {
      if (n <= cap) offset = 0;
    } else if (const size_t tail = oldest->offset; head_ > tail) {
      if (cap - head_ >= n) {
        offset = head_;
      } else if (n < tail) {  // wrap; strict, so head never catches up with tail
        offset = 0;
      }
    } else if (n < tail - head_) {
      offset = head_;
    }
  }
  if (!offset) {
    auto grown = std::make_shared<Buffer>();
    grown->capacity = std::max({n, kInitialElements, current_ ? 2 * current_->capacity : 0});
    HIQ_ASSIGN_OR_RETURN(grown->host, pinned_alloc(grown->capacity * sizeof(uint32_t), "transfer slot lists"));
    HIQ_ASSIGN_OR_RETURN(grown->device, device_alloc(grown->capacity * sizeof(uint32_t), "transfer slot lists"));
    current_ = std::move(grown);
    offset = 0;
  }
  live_.push_back({current_, *offset, n});
  head_ = *offset + n;
  return Region{static_cast<uint32_t*>(current_->host.get()) + *offset,
                static_cast<uint32_t*>(current_->device.get()) + *offset};
}

void IndexRing::release_oldest() {
  if (!live_.empty()) live_.pop_front();
}

size_t IndexRing::buffers_alive() const {
  std::set<const Buffer*> alive;
  if (current_) alive.insert(current_.get());
  for (const Live& l : live_) alive.insert(l.buffer.get());
  return alive.size();
}

}  // namespace hiq::cuda
