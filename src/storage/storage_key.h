// storage/storage_key.h — what names a page of KV in L3, and what makes stored
// KV usable by a server.
//
// L3 is shared: many servers, restarts, other models, other codecs, other
// tensor-parallel ranks may read and write the same directory or Redis. A
// stored page is only usable by a server whose KV has exactly the same bytes
// per token in exactly the same meaning, so every key is derived from a
// *fingerprint* of everything that decides those bytes (model identity, codec,
// record format, geometry of one TP rank, L1 dtype, page size, record
// alignment), and every stored value carries the fingerprint's hash again in
// its header (storage/storage_value.h).
//
// Keys chain. The prompt is cut into whole blocks of `block_tokens` tokens:
//
//   k_0 = H(seed(fp) ‖ ids of block 0)      k_i = H(k_{i−1} ‖ ids of block i)
//
// with H = XXH3-128 and ids as little-endian int32, so a block's key names the
// whole prefix up to and including it: a prompt's keys are the first keys of
// every longer prompt that extends it, changing one token changes that block's
// key and every later one, and two fingerprints never share a key (short of a
// 128-bit collision). Tokens after the last whole block have no key: they are
// never stored.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "core/status.h"
#include "kv/geometry.h"

namespace hiq {

// Version of the value header (storage/storage_value.h). Part of every key's
// seed, so servers that write different headers never share keys.
inline constexpr uint32_t kStorageValueVersion = 1;

// A 128-bit page key: XXH3-128 in its canonical (big-endian) byte order.
struct StorageKey {
  std::array<uint8_t, 16> bytes{};

  // 32 lowercase hex digits: the name of the page in a directory or in Redis.
  std::string hex() const;
  bool operator==(const StorageKey&) const = default;
};

struct StorageKeyHash {
  size_t operator()(const StorageKey& key) const noexcept;  // the key's first 8 bytes: already uniform
};

struct StorageFingerprint {
  std::string model;                             // hash of config.json + weights identity, or --model-fingerprint
  std::string codec;                             // KvCodecs::name() of the L2 records ("int8", "k=int8,v=int4h")
  uint32_t format_version = kRecordFormatVersion;  // record format (codec/codec.h)
  int layers = 0;                                // attention layers that cache KV
  int kv_heads = 0;                              // KV heads of one TP rank
  int head_dim = 0;                              // K head dim
  int v_head_dim = 0;                            // V head dim; 0 for MLA (no V row)
  int tp_rank = 0, tp_size = 1;
  int block_tokens = 0;                          // tokens per stored page
  size_t record_align = kDefaultRecordAlign;     // records are padded to this many bytes
  std::string l1_dtype = "bf16";                 // l1_dtype_name(): what a bf16 (identity) record holds

  // Errors (kInvalidArgument, naming the field): an empty model or codec, a
  // size that is not positive, a rank outside [0, tp_size).
  Status validate() const;
  // XXH3-64 of the canonical serialisation (every field, length-prefixed,
  // little-endian, in the order above, after a domain tag).
  uint64_t hash() const;
  // "model=… codec=int8 format=1 layers=36 kv_heads=8 head_dim=128/128 tp=0/1 block=64 align=16 l1=bf16".
  std::string describe() const;
  bool operator==(const StorageFingerprint&) const = default;
};

// The fingerprint of one TP rank's KV as a HostKvPool of this geometry and
// codec holds it, stored in pages of `block_tokens` tokens. A pool holding
// every rank's records (the CPU backend's tensor parallelism, host_kv_pool.h)
// passes its own geometry, tp_host_geometry(rank): tp_size × the layers,
// tp_rank 0, the first of the ranks each of its blocks holds.
StorageFingerprint make_storage_fingerprint(const KvGeometry& geometry, KvCodecs codec, size_t record_align,
                                            int block_tokens, std::string model, int tp_rank = 0);

// Bytes of one page's payload: block_tokens × (K + V record bytes) × layers,
// what a HostKvPool of the same geometry holds for those tokens. Errors: an
// invalid fingerprint, an unknown codec, a shape the record formats refuse.
Result<size_t> storage_page_bytes(const StorageFingerprint& fp);

// Keys of the whole blocks of `tokens` (tokens.size() / block_tokens of them).
// `fp` must be valid (HIQ_CHECK on block_tokens ≤ 0).
std::vector<StorageKey> storage_keys(const StorageFingerprint& fp, std::span<const int32_t> tokens);

}  // namespace hiq

template <>
struct std::hash<hiq::StorageKey> {
  size_t operator()(const hiq::StorageKey& key) const noexcept { return hiq::StorageKeyHash{}(key); }
};
