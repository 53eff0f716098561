// tests/storage_test_util.h — what the storage tests share: a temporary
// directory, a small fingerprint, deterministic payloads and prompts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "core/log.h"
#include "storage/storage_key.h"
#include "storage/storage_value.h"

namespace hiq::testing {

class StorageTempDir {
 public:
  StorageTempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("hiq_storage_test_" + std::to_string(rd()) + "_" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~StorageTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  StorageTempDir(const StorageTempDir&) = delete;
  StorageTempDir& operator=(const StorageTempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Captures the log lines written while it lives (instead of stderr).
class CapturedLog {
 public:
  CapturedLog() {
    set_log_sink([this](LogLevel, std::string_view component, std::string_view message) {
      std::lock_guard lock(mutex_);
      lines_.push_back(std::string(component) + ": " + std::string(message));
    });
  }
  ~CapturedLog() { set_log_sink(nullptr); }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;
  size_t count(std::string_view part) const {
    std::lock_guard lock(mutex_);
    size_t n = 0;
    for (const std::string& line : lines_) n += line.find(part) != std::string::npos;
    return n;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
};

// Two layers of int8 KV, 2 heads × 16, pages of 4 tokens: 4 × 2 × (48 + 48) = 768 payload bytes.
inline StorageFingerprint small_fingerprint(std::string codec = "int8") {
  StorageFingerprint fp;
  fp.model = "test-model-sha256:0123";
  fp.codec = std::move(codec);
  fp.layers = 2;
  fp.kv_heads = 2;
  fp.head_dim = 16;
  fp.v_head_dim = 16;
  fp.block_tokens = 4;
  fp.record_align = 16;
  return fp;
}

// A prompt of `n` tokens drawn from `seed`.
inline std::vector<int32_t> prompt(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 151'936);
  return tokens;
}

// `bytes` bytes that depend on `seed` alone.
inline std::vector<std::byte> payload(size_t bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> out(bytes);
  for (std::byte& b : out) b = static_cast<std::byte>(rng());
  return out;
}

// The stored values of `keys` under `fp`, payload i from seed `seed + i`.
inline std::vector<std::vector<std::byte>> encoded_pages(const StorageFingerprint& fp,
                                                         const std::vector<StorageKey>& keys, size_t payload_bytes,
                                                         uint32_t seed) {
  std::vector<std::vector<std::byte>> values;
  for (size_t i = 0; i < keys.size(); ++i)
    values.push_back(encode_value(fp, keys[i], payload(payload_bytes, seed + static_cast<uint32_t>(i))));
  return values;
}

}  // namespace hiq::testing
