// storage/storage_value.h — the bytes L3 stores for one page: a header that
// says whose KV it is, then the payload (the page's L2 records).
//
// Layout (little-endian, 64 bytes of header, then the payload):
//
//   offset  size  field
//        0     8  magic "HIQKVL3\0"
//        8     4  kStorageValueVersion (this layout)
//       12     4  zero
//       16     8  StorageFingerprint::hash() of the writer
//       24    16  the key the value was stored under
//       40     8  payload bytes
//       48     8  XXH3-64 of the payload
//       56     8  XXH3-64 of bytes [0, 56): the header's own checksum
//       64     …  payload
//
// A value is never trusted: storage is shared, outlives processes, and a file
// or a Redis key can be truncated, overwritten by another writer or bit-rotted.
// decode_value checks everything before handing out the payload, and no input
// whatever makes it read out of bounds or crash (fuzz/storage_value_fuzz.cc).
// The header's own checksum tells corruption (kDataLoss) from a well-formed
// value of another server (kFailedPrecondition).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "core/status.h"
#include "storage/storage_key.h"

namespace hiq {

inline constexpr size_t kStorageHeaderBytes = 64;

std::vector<std::byte> encode_value(const StorageFingerprint& fp, const StorageKey& key,
                                    std::span<const std::byte> payload);
// Writes the header of `value`, whose payload is already in place after its
// first kStorageHeaderBytes (so a page is gathered once, straight into the
// value it is stored as). encode_value is this after a copy.
void seal_value(std::span<std::byte> value, const StorageFingerprint& fp, const StorageKey& key);

// The payload inside `value` (a view of it), or why the value is unusable:
//   kDataLoss: shorter than a header, a bad magic or header checksum, a length
//              that disagrees with the value's size, a payload checksum that fails;
//   kFailedPrecondition: another header version, another fingerprint, another
//              key, or a payload of other than `expected_payload_bytes`.
// Checks run in that order, so a corrupt header is never read as foreign.
Result<std::span<const std::byte>> decode_value(std::span<const std::byte> value, const StorageFingerprint& fp,
                                                const StorageKey& key, size_t expected_payload_bytes);

}  // namespace hiq
