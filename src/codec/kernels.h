// codec/kernels.h (internal) — the per-row kernels behind encode_rows/decode_rows.
// Each implementation fills one KernelTable; codec.cc picks the table (the one
// dispatch point) and codec_index(kind) picks the entry.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "codec/codec.h"
#include "codec/numeric.h"

namespace hiq::codec_detail {

// Writes the whole record (payload, scales, zeroed padding) for one row.
using EncodeRowFn = void (*)(const RecordLayout& layout, const uint16_t* row, std::byte* record,
                             CodecStats& stats);
using DecodeRowFn = void (*)(const RecordLayout& layout, const std::byte* record, uint16_t* row);

struct KernelTable {
  EncodeRowFn encode[std::size(kAllCodecs)];
  DecodeRowFn decode[std::size(kAllCodecs)];
};

inline size_t codec_index(CodecKind kind) { return static_cast<size_t>(kind); }

const KernelTable& scalar_kernels();
// Null when the build has no such path; callers also check the CPU.
const KernelTable* avx2_kernels();    // head_dim % 8 == 0
const KernelTable* avx512_kernels();  // head_dim % 16 == 0

// Record field accessors shared by implementations.
inline uint16_t load_scale(const std::byte* record, const RecordLayout& layout, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(record + layout.scale_offset + 2 * i);
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
inline void store_scale(std::byte* record, const RecordLayout& layout, size_t i, uint16_t scale) {
  auto* p = reinterpret_cast<unsigned char*>(record + layout.scale_offset + 2 * i);
  p[0] = static_cast<unsigned char>(scale & 0xFF);
  p[1] = static_cast<unsigned char>(scale >> 8);
}
// Zeroes everything after the last scale (or payload) byte.
void zero_tail(const RecordLayout& layout, std::byte* record);

// The BF16 scale of a block whose largest magnitude is `amax`, for codes up to
// `qmax` (127 int8, 448 fp8, 7 int4).
inline uint16_t scale_for(float amax, float qmax) {
  return numeric::float_to_bf16(std::max(amax, numeric::kMinAmax) / qmax);
}

// For BF16 magnitude bits (bits & 0x7FFF): every NaN and ±Inf is ≥ 0x7F80.
inline bool magnitude_is_finite(uint16_t magnitude_bits) { return magnitude_bits < 0x7F80; }

// Writes head `h` of an int4/int4h record as a NaN head (code 0, stored 8;
// NaN scales). For head_dim even, where a head is whole bytes (vector paths).
inline void mark_nan_int4_head(const RecordLayout& layout, int h, std::byte* record) {
  const int dim = layout.shape.head_dim;
  std::memset(record + static_cast<size_t>(h) * dim / 2, 0x88, static_cast<size_t>(dim) / 2);
  for (int g = 0; g < layout.groups_per_head; ++g)
    store_scale(record, layout, static_cast<size_t>(h) * layout.groups_per_head + g, numeric::kBf16QuietNan);
}

}  // namespace hiq::codec_detail
