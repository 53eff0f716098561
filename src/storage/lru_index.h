// storage/lru_index.h — keys in least-recently-used order with their sizes:
// the eviction order of the memory and file backends. Not thread-safe (each
// backend guards it with its own mutex).
#pragma once

#include <cstddef>
#include <list>
#include <optional>
#include <unordered_map>
#include <utility>

#include "storage/storage_key.h"

namespace hiq {

template <typename Entry>
class LruIndex {
 public:
  struct Item {
    StorageKey key;
    size_t bytes = 0;
    Entry entry;
  };

  size_t size() const { return where_.size(); }
  size_t bytes() const { return bytes_; }

  // The item of `key` or null; its place in the order is unchanged.
  Item* find(const StorageKey& key) {
    auto it = where_.find(key);
    return it == where_.end() ? nullptr : &*it->second;
  }
  // The item of `key` or null, made the most recently used.
  Item* touch(const StorageKey& key) {
    auto it = where_.find(key);
    if (it == where_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return &*it->second;
  }
  // Inserts or replaces `key` as the most recently used item.
  void put(const StorageKey& key, size_t bytes, Entry entry) {
    erase(key);
    order_.push_front(Item{key, bytes, std::move(entry)});
    where_.emplace(key, order_.begin());
    bytes_ += bytes;
  }
  bool erase(const StorageKey& key) {
    auto it = where_.find(key);
    if (it == where_.end()) return false;
    bytes_ -= it->second->bytes;
    order_.erase(it->second);
    where_.erase(it);
    return true;
  }
  // Removes and returns the least recently used item, if any.
  std::optional<Item> pop_oldest() {
    if (order_.empty()) return std::nullopt;
    Item item = std::move(order_.back());
    where_.erase(item.key);
    order_.pop_back();
    bytes_ -= item.bytes;
    return item;
  }

 private:
  std::list<Item> order_;  // most recently used first
  std::unordered_map<StorageKey, typename std::list<Item>::iterator> where_;
  size_t bytes_ = 0;
};

}  // namespace hiq
