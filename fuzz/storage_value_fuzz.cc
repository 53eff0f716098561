// fuzz/storage_value_fuzz.cc — libFuzzer target of decode_value, the check
// every value read from L3 (a file, a Redis key: bytes anyone may have
// written) goes through. Any input must be refused with an error that names
// the key, or decode to a payload whose re-encoding is the input itself (so
// nothing but a value written for this fingerprint and key, intact, is ever
// accepted). A broken promise traps. The input's first byte also picks the
// payload size expected, so both the size check and the checksums are
// reached. Built with HIQ_FUZZ=ON (clang); run with scripts/fuzz storage_value.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "storage/storage_key.h"
#include "storage/storage_value.h"

namespace {

void require(bool promise) {
  if (!promise) __builtin_trap();
}

// The fingerprint and key of tests/storage_test_util.h (small_fingerprint(),
// the key of tokens {0, 1, 2, 3}), so the committed corpus replays in tests.
const hiq::StorageFingerprint& fingerprint() {
  static const hiq::StorageFingerprint fp = [] {
    hiq::StorageFingerprint f;
    f.model = "test-model-sha256:0123";
    f.codec = "int8";
    f.layers = 2;
    f.kv_heads = 2;
    f.head_dim = 16;
    f.v_head_dim = 16;
    f.block_tokens = 4;
    f.record_align = 16;
    return f;
  }();
  return fp;
}

const hiq::StorageKey& key() {
  static const hiq::StorageKey k = hiq::storage_keys(fingerprint(), std::vector<int32_t>{0, 1, 2, 3})[0];
  return k;
}

void check(std::span<const std::byte> value, size_t expected) {
  const auto decoded = hiq::decode_value(value, fingerprint(), key(), expected);
  if (!decoded.is_ok()) {
    require(decoded.status().message().starts_with("storage value " + key().hex()));
    return;
  }
  require(decoded->size() == expected);
  const auto again = hiq::encode_value(fingerprint(), key(), *decoded);
  require(again.size() == value.size() && std::memcmp(again.data(), value.data(), value.size()) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  check(bytes, size >= hiq::kStorageHeaderBytes ? size - hiq::kStorageHeaderBytes : 0);  // the size it claims
  if (size > 0) check(bytes.subspan(1), data[0]);  // a size the input picks
  return 0;
}
