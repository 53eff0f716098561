#include "storage/storage_value.h"

#include <cstring>
#include <string>

#include <xxhash.h>

#include "core/check.h"

namespace hiq {
namespace {

constexpr char kMagic[8] = {'H', 'I', 'Q', 'K', 'V', 'L', '3', '\0'};
constexpr size_t kVersionOffset = 8, kFingerprintOffset = 16, kKeyOffset = 24, kPayloadBytesOffset = 40,
                 kPayloadHashOffset = 48, kHeaderHashOffset = 56;

void put_u32(std::byte* at, uint32_t v) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<std::byte>(v >> (8 * i));
}
void put_u64(std::byte* at, uint64_t v) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<std::byte>(v >> (8 * i));
}
uint32_t get_u32(const std::byte* at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(at[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const std::byte* at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(at[i]) << (8 * i);
  return v;
}

std::string hex64(uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[static_cast<size_t>(i)] = kDigits[v & 0xf];
  return out;
}

}  // namespace

void seal_value(std::span<std::byte> value, const StorageFingerprint& fp, const StorageKey& key) {
  HIQ_CHECK_MSG(value.size() >= kStorageHeaderBytes, "seal_value: a value is at least its header");
  std::byte* h = value.data();
  const std::span<const std::byte> payload = value.subspan(kStorageHeaderBytes);
  std::memset(h, 0, kStorageHeaderBytes);
  std::memcpy(h, kMagic, sizeof(kMagic));
  put_u32(h + kVersionOffset, kStorageValueVersion);
  put_u64(h + kFingerprintOffset, fp.hash());
  std::memcpy(h + kKeyOffset, key.bytes.data(), key.bytes.size());
  put_u64(h + kPayloadBytesOffset, payload.size());
  put_u64(h + kPayloadHashOffset, XXH3_64bits(payload.data(), payload.size()));
  put_u64(h + kHeaderHashOffset, XXH3_64bits(h, kHeaderHashOffset));
}

std::vector<std::byte> encode_value(const StorageFingerprint& fp, const StorageKey& key,
                                    std::span<const std::byte> payload) {
  std::vector<std::byte> value(kStorageHeaderBytes + payload.size());
  if (!payload.empty()) std::memcpy(value.data() + kStorageHeaderBytes, payload.data(), payload.size());
  seal_value(value, fp, key);
  return value;
}

Result<std::span<const std::byte>> decode_value(std::span<const std::byte> value, const StorageFingerprint& fp,
                                                const StorageKey& key, size_t expected_payload_bytes) {
  const auto where = [&] { return "storage value " + key.hex(); };  // built only for an error
  if (value.size() < kStorageHeaderBytes)
    return data_loss(where() + ": " + std::to_string(value.size()) + " bytes, shorter than the " +
                     std::to_string(kStorageHeaderBytes) + "-byte header");
  const std::byte* h = value.data();
  if (std::memcmp(h, kMagic, sizeof(kMagic)) != 0) return data_loss(where() + ": bad magic (not a HiQCache value)");
  if (get_u64(h + kHeaderHashOffset) != XXH3_64bits(h, kHeaderHashOffset))
    return data_loss(where() + ": header checksum mismatch");

  const uint32_t version = get_u32(h + kVersionOffset);
  if (version != kStorageValueVersion)
    return failed_precondition(where() + ": header version " + std::to_string(version) + ", this build reads " +
                               std::to_string(kStorageValueVersion));
  const uint64_t fingerprint = get_u64(h + kFingerprintOffset);
  if (fingerprint != fp.hash())
    return failed_precondition(where() + ": written for fingerprint " + hex64(fingerprint) + ", not this server's " +
                               hex64(fp.hash()) + " (" + fp.describe() + ")");
  if (std::memcmp(h + kKeyOffset, key.bytes.data(), key.bytes.size()) != 0) {
    StorageKey stored;
    std::memcpy(stored.bytes.data(), h + kKeyOffset, stored.bytes.size());
    return failed_precondition(where() + ": holds the value of key " + stored.hex());
  }
  const uint64_t payload_bytes = get_u64(h + kPayloadBytesOffset);
  if (payload_bytes != value.size() - kStorageHeaderBytes)
    return data_loss(where() + ": header says " + std::to_string(payload_bytes) + " payload bytes, the value holds " +
                     std::to_string(value.size() - kStorageHeaderBytes));
  if (payload_bytes != expected_payload_bytes)
    return failed_precondition(where() + ": " + std::to_string(payload_bytes) + " payload bytes, expected " +
                               std::to_string(expected_payload_bytes));
  const std::span<const std::byte> payload = value.subspan(kStorageHeaderBytes);
  if (get_u64(h + kPayloadHashOffset) != XXH3_64bits(payload.data(), payload.size()))
    return data_loss(where() + ": payload checksum mismatch");
  return payload;
}

}  // namespace hiq
