#include "storage/storage_options.h"

#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <string>

#include "core/json_input.h"
#include "core/units.h"
#include "storage/storage_value.h"

namespace hiq {

std::string_view storage_backend_name(StorageBackendKind kind) {
  switch (kind) {
    case StorageBackendKind::kNone: return "none";
    case StorageBackendKind::kMemory: return "memory";
    case StorageBackendKind::kFile: return "file";
    case StorageBackendKind::kRedis: return "redis";
  }
  return "?";
}

Result<StorageBackendKind> parse_storage_backend(std::string_view name) {
  for (StorageBackendKind kind :
       {StorageBackendKind::kNone, StorageBackendKind::kMemory, StorageBackendKind::kFile, StorageBackendKind::kRedis})
    if (name == storage_backend_name(kind)) return kind;
  return invalid_argument("storage backend " + quote_for_message(name) + " is not one of none, file, redis, memory");
}

std::string_view storage_prefetch_policy_name(StoragePrefetchPolicy policy) {
  switch (policy) {
    case StoragePrefetchPolicy::kBestEffort: return "best_effort";
    case StoragePrefetchPolicy::kWaitComplete: return "wait_complete";
    case StoragePrefetchPolicy::kTimeout: return "timeout";
  }
  return "?";
}

Result<StoragePrefetchPolicy> parse_storage_prefetch_policy(std::string_view name) {
  for (StoragePrefetchPolicy policy :
       {StoragePrefetchPolicy::kBestEffort, StoragePrefetchPolicy::kWaitComplete, StoragePrefetchPolicy::kTimeout})
    if (name == storage_prefetch_policy_name(policy)) return policy;
  return invalid_argument("storage prefetch policy " + quote_for_message(name) +
                          " is not one of best_effort, wait_complete, timeout");
}

Status StorageOptions::validate() const {
  if (threads < 1 || threads > 256)
    return invalid_argument("storage threads must be in [1, 256] (got " + std::to_string(threads) + ")");
  if (!(prefetch_timeout_base_s >= 0) || !std::isfinite(prefetch_timeout_base_s))
    return invalid_argument("storage prefetch_timeout_base must be a finite number ≥ 0");
  if (!(prefetch_timeout_per_ki_token_s >= 0) || !std::isfinite(prefetch_timeout_per_ki_token_s))
    return invalid_argument("storage prefetch_timeout_per_ki_token must be a finite number ≥ 0");
  if (!(prefetch_timeout_max_s >= 0) || !std::isfinite(prefetch_timeout_max_s))
    return invalid_argument("storage prefetch_timeout_max must be a finite number ≥ 0");
  switch (backend) {
    case StorageBackendKind::kNone: return Status::ok();
    case StorageBackendKind::kMemory:
      if (memory_capacity_bytes == 0) return invalid_argument("memory storage: the size must be positive");
      return Status::ok();
    case StorageBackendKind::kFile: return file.validate();
    case StorageBackendKind::kRedis: return redis.validate();
  }
  return Status::ok();
}

namespace {

const std::set<std::string, std::less<>> kCommonKeys = {"threads", "prefetch_threshold", "prefetch_timeout_base",
                                                        "prefetch_timeout_per_ki_token", "prefetch_timeout_max"};
const std::set<std::string, std::less<>> kMemoryKeys = {"size"};
const std::set<std::string, std::less<>> kFileKeys = {"path", "size", "fsync"};
const std::set<std::string, std::less<>> kRedisKeys = {
    "host", "port", "prefix", "connect_timeout_ms", "command_timeout_ms", "reconnect_initial_ms", "reconnect_max_ms",
    "connections", "ttl_s"};

std::string join(const std::set<std::string, std::less<>>& a, const std::set<std::string, std::less<>>& b) {
  std::string out;
  for (const auto* set : {&a, &b})
    for (const std::string& key : *set) out += (out.empty() ? "" : ", ") + key;
  return out;
}

// Typed readers of one extra-config field; each writes `out` only when the key is present.
class ExtraConfig {
 public:
  explicit ExtraConfig(const nlohmann::json& object) : object_(object) {}

  Status integer(const char* key, int& out, int min, int max) const {
    const auto it = object_.find(key);
    if (it == object_.end()) return Status::ok();
    if (!it->is_number_integer() || *it < min || *it > max)
      return bad(key, "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]", *it);
    out = it->get<int>();
    return Status::ok();
  }
  Status count(const char* key, size_t& out) const {
    const auto it = object_.find(key);
    if (it == object_.end()) return Status::ok();
    if (!it->is_number_unsigned()) return bad(key, "a non-negative integer", *it);
    out = it->get<size_t>();
    return Status::ok();
  }
  Status number(const char* key, double& out) const {
    const auto it = object_.find(key);
    if (it == object_.end()) return Status::ok();
    if (!it->is_number() || !(it->get<double>() >= 0)) return bad(key, "a number ≥ 0", *it);
    out = it->get<double>();
    return Status::ok();
  }
  Status boolean(const char* key, bool& out) const {
    const auto it = object_.find(key);
    if (it == object_.end()) return Status::ok();
    if (!it->is_boolean()) return bad(key, "true or false", *it);
    out = it->get<bool>();
    return Status::ok();
  }
  Status string(const char* key, std::string& out) const {
    const auto it = object_.find(key);
    if (it == object_.end()) return Status::ok();
    if (!it->is_string()) return bad(key, "a string", *it);
    out = it->get<std::string>();
    return Status::ok();
  }
  Status size(const char* key, uint64_t& out) const {
    const auto it = object_.find(key);
    if (it == object_.end()) return Status::ok();
    if (it->is_number_unsigned()) {
      out = it->get<uint64_t>();
      return Status::ok();
    }
    if (!it->is_string()) return bad(key, "a size such as \"64GB\" or a number of bytes", *it);
    auto bytes = parse_byte_size(it->get<std::string>());
    if (!bytes.is_ok()) return bytes.status().with_context(std::string("storage extra config: ") + key);
    out = *bytes;
    return Status::ok();
  }

 private:
  static Status bad(const char* key, const std::string& expected, const nlohmann::json& value) {
    return invalid_argument(std::string("storage extra config: ") + key + " must be " + expected + " (got " +
                            describe_json_value(value) + ")");
  }
  const nlohmann::json& object_;
};

}  // namespace

Result<StorageOptions> parse_storage_options(std::string_view backend, std::string_view extra_config_json,
                                             std::string_view prefetch_policy, std::string_view size) {
  StorageOptions options;
  HIQ_ASSIGN_OR_RETURN(options.backend, parse_storage_backend(backend));
  HIQ_ASSIGN_OR_RETURN(options.prefetch_policy, parse_storage_prefetch_policy(prefetch_policy));

  nlohmann::json config = nlohmann::json::object();
  if (extra_config_json.find_first_not_of(" \t\r\n") != std::string_view::npos) {
    auto parsed = parse_strict_json(extra_config_json, "storage extra config", 8);
    if (!parsed.is_ok()) return invalid_argument(parsed.status().message());
    config = std::move(*parsed);
    if (!config.is_object()) return invalid_argument("storage extra config must be a JSON object");
  }

  const std::set<std::string, std::less<>> none;
  const auto& backend_keys = options.backend == StorageBackendKind::kFile    ? kFileKeys
                             : options.backend == StorageBackendKind::kRedis ? kRedisKeys
                             : options.backend == StorageBackendKind::kMemory ? kMemoryKeys
                                                                              : none;
  for (const auto& [key, value] : config.items()) {
    if (options.backend == StorageBackendKind::kNone)
      return invalid_argument("storage extra config is given (" + quote_for_message(key) +
                              ") but the storage backend is none");
    if (!kCommonKeys.contains(key) && !backend_keys.contains(key))
      return invalid_argument("storage extra config: unknown key " + quote_for_message(key) + " for the " +
                              std::string(storage_backend_name(options.backend)) + " backend (known: " +
                              join(backend_keys, kCommonKeys) + ")");
  }

  std::optional<uint64_t> size_flag;
  if (!size.empty()) {
    if (options.backend == StorageBackendKind::kNone)
      return invalid_argument("--hicache-storage-size is given but the storage backend is none");
    if (options.backend == StorageBackendKind::kRedis)
      return invalid_argument("--hicache-storage-size bounds the file and memory backends; Redis bounds itself "
                              "(run it with maxmemory and allkeys-lru)");
    if (config.contains("size"))
      return invalid_argument("--hicache-storage-size and the extra config's \"size\" both bound storage: give one "
                              "of them");
    auto bytes = parse_byte_size(size, kGB);
    if (!bytes.is_ok()) return bytes.status().with_context("--hicache-storage-size");
    if (*bytes == 0) return invalid_argument("--hicache-storage-size must be more than 0 bytes");
    size_flag = *bytes;
  }

  const ExtraConfig extra(config);
  HIQ_RETURN_IF_ERROR(extra.integer("threads", options.threads, 1, 256));
  HIQ_RETURN_IF_ERROR(extra.count("prefetch_threshold", options.prefetch_threshold_tokens));
  HIQ_RETURN_IF_ERROR(extra.number("prefetch_timeout_base", options.prefetch_timeout_base_s));
  HIQ_RETURN_IF_ERROR(extra.number("prefetch_timeout_per_ki_token", options.prefetch_timeout_per_ki_token_s));
  HIQ_RETURN_IF_ERROR(extra.number("prefetch_timeout_max", options.prefetch_timeout_max_s));
  constexpr int kMaxMs = 3'600'000;
  switch (options.backend) {
    case StorageBackendKind::kNone: break;
    case StorageBackendKind::kMemory:
      HIQ_RETURN_IF_ERROR(extra.size("size", options.memory_capacity_bytes));
      if (size_flag) options.memory_capacity_bytes = *size_flag;
      break;
    case StorageBackendKind::kFile:
      HIQ_RETURN_IF_ERROR(extra.string("path", options.file.path));
      HIQ_RETURN_IF_ERROR(extra.size("size", options.file.capacity_bytes));
      if (size_flag) options.file.capacity_bytes = *size_flag;
      HIQ_RETURN_IF_ERROR(extra.boolean("fsync", options.file.fsync));
      if (options.file.path.empty()) return invalid_argument("file storage needs \"path\" in the extra config");
      if (options.file.capacity_bytes == 0)
        return invalid_argument("file storage needs a positive size: --hicache-storage-size 64GB, or \"size\" in "
                                "the extra config");
      break;
    case StorageBackendKind::kRedis: {
      RedisBackendOptions& r = options.redis;
      HIQ_RETURN_IF_ERROR(extra.string("host", r.host));
      HIQ_RETURN_IF_ERROR(extra.integer("port", r.port, 1, 65535));
      HIQ_RETURN_IF_ERROR(extra.string("prefix", r.key_prefix));
      HIQ_RETURN_IF_ERROR(extra.integer("connect_timeout_ms", r.connect_timeout_ms, 1, kMaxMs));
      HIQ_RETURN_IF_ERROR(extra.integer("command_timeout_ms", r.command_timeout_ms, 1, kMaxMs));
      HIQ_RETURN_IF_ERROR(extra.integer("reconnect_initial_ms", r.reconnect_initial_ms, 1, kMaxMs));
      HIQ_RETURN_IF_ERROR(extra.integer("reconnect_max_ms", r.reconnect_max_ms, 1, kMaxMs));
      HIQ_RETURN_IF_ERROR(extra.integer("connections", r.connections, 1, 1024));
      HIQ_RETURN_IF_ERROR(extra.integer("ttl_s", r.ttl_seconds, 0, std::numeric_limits<int>::max()));
      break;
    }
  }
  HIQ_RETURN_IF_ERROR(options.validate());
  return options;
}

Result<std::unique_ptr<StorageBackend>> make_storage_backend(const StorageOptions& options) {
  HIQ_RETURN_IF_ERROR(options.validate());
  switch (options.backend) {
    case StorageBackendKind::kNone: return std::unique_ptr<StorageBackend>();
    case StorageBackendKind::kMemory: return make_memory_backend(options.memory_capacity_bytes);
    case StorageBackendKind::kFile: return make_file_backend(options.file);
    case StorageBackendKind::kRedis: return make_redis_backend(options.redis);
  }
  return internal_error("make_storage_backend: unknown backend kind");
}

int default_storage_block_tokens(StorageBackendKind backend, size_t bytes_per_token, int page_size) {
  const auto page = static_cast<size_t>(std::max(page_size, 1));
  if (backend != StorageBackendKind::kRedis) return static_cast<int>(std::max<size_t>(page, 64 / page * page));
  size_t block = page;
  while (block * 2 <= 1024 && (block * 2) * bytes_per_token + kStorageHeaderBytes <= kRedisValueTargetBytes) block *= 2;
  return static_cast<int>(block);
}

}  // namespace hiq
