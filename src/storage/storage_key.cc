#include "storage/storage_key.h"

#include <cstring>

#include <xxhash.h>

namespace hiq {
namespace {

// The canonical serialisation of a fingerprint: a domain tag, then every field
// little-endian, strings length-prefixed. Changing it changes every key.
class Serialiser {
 public:
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void i32(int v) { u32(static_cast<uint32_t>(v)); }
  void str(std::string_view s) {
    u64(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

std::vector<uint8_t> canonical(const StorageFingerprint& fp) {
  Serialiser s;
  s.str("hiq-storage-fingerprint");
  s.u32(kStorageValueVersion);
  s.str(fp.model);
  s.str(fp.codec);
  s.u32(fp.format_version);
  s.i32(fp.layers);
  s.i32(fp.kv_heads);
  s.i32(fp.head_dim);
  s.i32(fp.v_head_dim);
  s.i32(fp.tp_rank);
  s.i32(fp.tp_size);
  s.i32(fp.block_tokens);
  s.u64(fp.record_align);
  s.str(fp.l1_dtype);
  return s.bytes();
}

StorageKey key_of(XXH128_hash_t hash) {
  XXH128_canonical_t canonical_hash;
  XXH128_canonicalFromHash(&canonical_hash, hash);
  StorageKey key;
  static_assert(sizeof(canonical_hash.digest) == sizeof(key.bytes));
  std::memcpy(key.bytes.data(), canonical_hash.digest, key.bytes.size());
  return key;
}

Status positive(int value, const char* field) {
  if (value > 0) return Status::ok();
  return invalid_argument(std::string("storage fingerprint: ") + field + " must be positive (got " +
                          std::to_string(value) + ")");
}

}  // namespace

std::string StorageKey::hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * bytes.size(), '0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 0xf];
  }
  return out;
}

size_t StorageKeyHash::operator()(const StorageKey& key) const noexcept {
  uint64_t h;
  std::memcpy(&h, key.bytes.data(), sizeof(h));
  return static_cast<size_t>(h);
}

Status StorageFingerprint::validate() const {
  if (model.empty()) return invalid_argument("storage fingerprint: model is empty");
  if (codec.empty()) return invalid_argument("storage fingerprint: codec is empty");
  if (l1_dtype.empty()) return invalid_argument("storage fingerprint: l1_dtype is empty");
  HIQ_RETURN_IF_ERROR(positive(layers, "layers"));
  HIQ_RETURN_IF_ERROR(positive(kv_heads, "kv_heads"));
  HIQ_RETURN_IF_ERROR(positive(head_dim, "head_dim"));
  if (v_head_dim < 0)
    return invalid_argument("storage fingerprint: v_head_dim must be 0 (MLA) or positive (got " +
                            std::to_string(v_head_dim) + ")");
  HIQ_RETURN_IF_ERROR(positive(tp_size, "tp_size"));
  if (tp_rank < 0 || tp_rank >= tp_size)
    return invalid_argument("storage fingerprint: tp_rank " + std::to_string(tp_rank) + " is outside [0, " +
                            std::to_string(tp_size) + ")");
  HIQ_RETURN_IF_ERROR(positive(block_tokens, "block_tokens"));
  if (record_align == 0) return invalid_argument("storage fingerprint: record_align must be positive");
  return Status::ok();
}

uint64_t StorageFingerprint::hash() const {
  const std::vector<uint8_t> bytes = canonical(*this);
  return XXH3_64bits(bytes.data(), bytes.size());
}

std::string StorageFingerprint::describe() const {
  return "model=" + model + " codec=" + codec + " format=" + std::to_string(format_version) +
         " layers=" + std::to_string(layers) + " kv_heads=" + std::to_string(kv_heads) +
         " head_dim=" + std::to_string(head_dim) + "/" + std::to_string(v_head_dim) +
         " tp=" + std::to_string(tp_rank) + "/" + std::to_string(tp_size) +
         " block=" + std::to_string(block_tokens) + " align=" + std::to_string(record_align) + " l1=" + l1_dtype;
}

std::vector<StorageKey> storage_keys(const StorageFingerprint& fp, std::span<const int32_t> tokens) {
  HIQ_CHECK_MSG(fp.block_tokens > 0, "storage_keys needs a fingerprint with block_tokens > 0");
  const size_t block = static_cast<size_t>(fp.block_tokens);
  const size_t blocks = tokens.size() / block;
  std::vector<StorageKey> keys;
  keys.reserve(blocks);
  if (blocks == 0) return keys;

  const std::vector<uint8_t> serialised = canonical(fp);
  StorageKey previous = key_of(XXH3_128bits(serialised.data(), serialised.size()));  // seed(fp)
  std::vector<uint8_t> input(previous.bytes.size() + 4 * block);
  for (size_t b = 0; b < blocks; ++b) {
    std::memcpy(input.data(), previous.bytes.data(), previous.bytes.size());
    uint8_t* ids = input.data() + previous.bytes.size();
    for (size_t t = 0; t < block; ++t) {
      const auto id = static_cast<uint32_t>(tokens[b * block + t]);
      for (int i = 0; i < 4; ++i) ids[4 * t + static_cast<size_t>(i)] = static_cast<uint8_t>(id >> (8 * i));
    }
    previous = key_of(XXH3_128bits(input.data(), input.size()));
    keys.push_back(previous);
  }
  return keys;
}

}  // namespace hiq
