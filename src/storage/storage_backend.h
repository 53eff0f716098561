// storage/storage_backend.h — the L3 tier's backends: where stored values live.
//
// A backend is a synchronous, thread-safe map from StorageKey to bytes. It
// knows nothing of fingerprints or payloads: it stores and returns values as
// they are (storage/storage_value.h gives them meaning), and StorageEngine
// (storage/storage_engine.h) calls it from its worker threads.
//
// Batches follow the prefix structure of keys (storage/storage_key.h): a
// prompt's keys are asked for in order, and the first miss ends the usable
// run, since later blocks chain through it.
//
// Failure semantics, common to every backend:
//   - A missing key is not an error: exists() stops counting at it, read()
//     hands an empty value in its place.
//   - An error (the service is down, the disk is full or failing) fails the
//     whole call with a Status; nothing is partly returned.
//   - set() stores each value atomically: a reader sees the old value, the
//     new one, or none — never part of one. A failed set() may have stored
//     some of the batch's values (each one whole) and not the others.
//   - Capacity is bounded; storing evicts least recently used values (memory,
//     file) or leaves it to the service (Redis's maxmemory policy).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "storage/storage_key.h"

namespace hiq {

class StorageBackend {
 public:
  virtual ~StorageBackend() = default;

  // "memory", "file", "redis".
  virtual std::string_view name() const = 0;
  // How many of `keys`, from the first, are held: stops at the first miss.
  virtual Result<size_t> exists(std::span<const StorageKey> keys) = 0;
  // Hands the stored value of each key, as it was set, to `visit` in key
  // order (an empty span for a key not held) until `visit` returns false or
  // the keys end; the span is valid only during the call, so a caller copies
  // what it keeps and a backend may reuse its buffer (no value is allocated
  // per read). `visit` must not call the backend. A read counts as a use for
  // LRU eviction. On an error, values visited before it were still visited.
  using ValueVisitor = std::function<bool(size_t index, std::span<const std::byte> value)>;
  virtual Status read(std::span<const StorageKey> keys, const ValueVisitor& visit) = 0;
  // read(), copying every value (an empty vector for a key not held).
  Result<std::vector<std::vector<std::byte>>> get(std::span<const StorageKey> keys) {
    std::vector<std::vector<std::byte>> values(keys.size());
    HIQ_RETURN_IF_ERROR(read(keys, [&](size_t i, std::span<const std::byte> value) {
      values[i].assign(value.begin(), value.end());
      return true;
    }));
    return values;
  }
  // Stores values[i] under keys[i], replacing what was there. Errors:
  // kInvalidArgument (lengths differ, an empty value), kResourceExhausted (a
  // value larger than the whole capacity, a full disk), kUnavailable (the
  // service or the disk failed).
  virtual Status set(std::span<const StorageKey> keys, std::span<const std::vector<std::byte>> values) = 0;
  // Drops the keys (those not held are ignored). The engine calls it on
  // values that fail to decode, so a corrupt page is not read again and again
  // (and is stored anew once recomputed). The default does nothing: for a
  // backend that cannot delete, such a value stays a miss until overwritten.
  virtual Status remove(std::span<const StorageKey> keys) {
    (void)keys;
    return Status::ok();
  }
};

// In process memory, LRU, at most `capacity_bytes` bytes of values. For tests
// and simulations. Errors: a capacity of 0.
Result<std::unique_ptr<StorageBackend>> make_memory_backend(size_t capacity_bytes);

}  // namespace hiq
