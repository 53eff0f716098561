// storage/storage_options.h — how a server is told to use L3: SGLang's three
// flags, parsed in one place.
//
//   --hicache-storage-backend none|file|redis   (and `memory`, for simulations and tests)
//   --hicache-storage-backend-extra-config JSON  the backend's settings:
//        file:   {"path": "/mnt/kv", "size": "64GB", "fsync": false}
//        redis:  {"host": "10.0.0.5", "port": 6379, "prefix": "hiq:", "connect_timeout_ms": 500,
//                 "command_timeout_ms": 2000, "reconnect_initial_ms": 100, "reconnect_max_ms": 5000,
//                 "connections": 4, "ttl_s": 0}
//        memory: {"size": "1GB"}
//      and, for any backend: "threads" (the engine's workers), SGLang's
//      "prefetch_threshold", "prefetch_timeout_base", "prefetch_timeout_per_ki_token",
//      "prefetch_timeout_max".
//   --hicache-storage-prefetch-policy best_effort|wait_complete|timeout
//
// Messages name the setting, never the flag (flags are tools/' business).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string_view>

#include "core/status.h"
#include "storage/file_backend.h"
#include "storage/redis_backend.h"
#include "storage/storage_backend.h"

namespace hiq {

enum class StorageBackendKind : uint8_t { kNone, kMemory, kFile, kRedis };
std::string_view storage_backend_name(StorageBackendKind kind);
// "none", "memory", "file", "redis".
Result<StorageBackendKind> parse_storage_backend(std::string_view name);

// When a queued request that L3 can serve is admitted (SGLang's policies).
enum class StoragePrefetchPolicy : uint8_t {
  kBestEffort,    // at once, with whatever the prefetch has brought so far
  kWaitComplete,  // once the prefetch has finished
  kTimeout,       // once it has finished, or after StorageOptions::prefetch_timeout_s()
};
std::string_view storage_prefetch_policy_name(StoragePrefetchPolicy policy);
// "best_effort", "wait_complete", "timeout".
Result<StoragePrefetchPolicy> parse_storage_prefetch_policy(std::string_view name);

struct StorageOptions {
  StorageBackendKind backend = StorageBackendKind::kNone;
  StoragePrefetchPolicy prefetch_policy = StoragePrefetchPolicy::kBestEffort;
  int threads = 2;                             // StorageEngine workers ("threads")
  // SGLang's prefetch settings and defaults (PrefetchTimeoutConfig):
  size_t prefetch_threshold_tokens = 256;      // shorter L3 hits are not fetched ("prefetch_threshold")
  double prefetch_timeout_base_s = 2.0;        // kTimeout: fixed part ("prefetch_timeout_base")
  double prefetch_timeout_per_ki_token_s = 0.1;  // kTimeout: per 1024 tokens ("prefetch_timeout_per_ki_token")
  double prefetch_timeout_max_s = 30.0;        // kTimeout: at most ("prefetch_timeout_max")
  uint64_t memory_capacity_bytes = uint64_t{1} << 30;  // the memory backend's size
  FileBackendOptions file;                     // the file backend's settings
  RedisBackendOptions redis;                   // the redis backend's settings

  // Checks the fields above and those of the chosen backend's options.
  Status validate() const;
  // The prefetch wait of kTimeout for `tokens` tokens to fetch:
  // min(max, base + per_ki_token × tokens / 1024).
  double prefetch_timeout_s(size_t tokens) const {
    return std::min(prefetch_timeout_max_s,
                    prefetch_timeout_base_s + prefetch_timeout_per_ki_token_s * static_cast<double>(tokens) / 1024.0);
  }
};

// Builds validated options from the three flags' text. `extra_config_json` may
// be empty (no settings); its keys must belong to the chosen backend or be
// common ones — an unknown key is an error, never ignored. Sizes are strings
// ("64GB", "0.5TiB") or numbers of bytes. Errors: kInvalidArgument naming the
// setting.
// `size` is --hicache-storage-size as typed (empty: not given): the file or
// memory backend's capacity ("64GB", "0.5TiB"; a plain number is GB), in
// place of the extra config's "size" (giving both is an error, naming both;
// Redis bounds itself with its own maxmemory, so the flag is refused there).
Result<StorageOptions> parse_storage_options(std::string_view backend, std::string_view extra_config_json,
                                             std::string_view prefetch_policy, std::string_view size = {});

// The tokens of a stored block when none are given: a whole number of
// `page_size` pages, a power of two times page_size. file: 64 tokens (rates
// are flat from 16 to 128, and fewer files cost fewer opens). redis: the
// largest such block whose value is at most kRedisValueTargetBytes, since
// Redis and hiredis read large values markedly slower (loopback, int8 pages:
// 2.2 GB/s at 1.2 MB, 1.7 at 2.4 MB, 0.8 at 4.8 MB; docs/benchmarks.md).
inline constexpr size_t kRedisValueTargetBytes = size_t{5} << 18;  // 1.25 MiB
int default_storage_block_tokens(StorageBackendKind backend, size_t bytes_per_token, int page_size);

// The backend `options` name; null for kNone. Errors: invalid options, a
// file directory that cannot be created or read.
Result<std::unique_ptr<StorageBackend>> make_storage_backend(const StorageOptions& options);

}  // namespace hiq
