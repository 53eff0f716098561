// The memory backend: values in an LRU index under one mutex.
#include <mutex>

#include "storage/lru_index.h"
#include "storage/storage_backend.h"

namespace hiq {
namespace {

class MemoryBackend final : public StorageBackend {
 public:
  explicit MemoryBackend(size_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

  std::string_view name() const override { return "memory"; }

  Result<size_t> exists(std::span<const StorageKey> keys) override {
    std::lock_guard lock(mutex_);
    size_t held = 0;
    while (held < keys.size() && index_.find(keys[held]) != nullptr) ++held;
    return held;
  }

  Status read(std::span<const StorageKey> keys, const ValueVisitor& visit) override {
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < keys.size(); ++i) {
      const auto* item = index_.touch(keys[i]);
      if (!visit(i, item != nullptr ? std::span<const std::byte>(item->entry) : std::span<const std::byte>())) break;
    }
    return Status::ok();
  }

  Status set(std::span<const StorageKey> keys, std::span<const std::vector<std::byte>> values) override {
    if (keys.size() != values.size())
      return invalid_argument("memory storage: " + std::to_string(keys.size()) + " keys but " +
                              std::to_string(values.size()) + " values");
    for (const auto& value : values) {
      if (value.empty()) return invalid_argument("memory storage: an empty value");
      if (value.size() > capacity_bytes_)
        return resource_exhausted("memory storage: a value of " + std::to_string(value.size()) +
                                  " bytes exceeds the capacity of " + std::to_string(capacity_bytes_));
    }
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < keys.size(); ++i) {
      index_.put(keys[i], values[i].size(), values[i]);
      while (index_.bytes() > capacity_bytes_) index_.pop_oldest();
    }
    return Status::ok();
  }

  Status remove(std::span<const StorageKey> keys) override {
    std::lock_guard lock(mutex_);
    for (const StorageKey& key : keys) index_.erase(key);
    return Status::ok();
  }

 private:
  const size_t capacity_bytes_;
  std::mutex mutex_;
  LruIndex<std::vector<std::byte>> index_;
};

}  // namespace

Result<std::unique_ptr<StorageBackend>> make_memory_backend(size_t capacity_bytes) {
  if (capacity_bytes == 0) return invalid_argument("memory storage: the capacity must be positive");
  return std::unique_ptr<StorageBackend>(new MemoryBackend(capacity_bytes));
}

}  // namespace hiq
