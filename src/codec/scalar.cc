// codec/scalar.cc — the scalar reference of every codec. It is the definition of
// the formats in executable form: every other implementation is tested to
// produce exactly its bytes (encode) and values (decode).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "codec/hadamard.h"
#include "codec/kernels.h"
#include "codec/numeric.h"

namespace hiq::codec_detail {
namespace {

using namespace numeric;
static_assert(std::endian::native == std::endian::little, "record formats are little-endian");

// Max |x| over a head; false when the head holds a NaN or ±Inf.
bool finite_amax(const uint16_t* x, int n, float& amax) {
  amax = 0.0f;
  bool finite = true;
  for (int i = 0; i < n; ++i) {
    finite &= bf16_is_finite(x[i]);
    amax = std::max(amax, std::fabs(bf16_to_float(x[i])));
  }
  return finite;
}

// ---- bf16 ------------------------------------------------------------------

void encode_bf16(const RecordLayout& layout, const uint16_t* row, std::byte* record, CodecStats& stats) {
  const int heads = layout.shape.num_heads, dim = layout.shape.head_dim;
  for (int h = 0; h < heads; ++h) {
    bool finite = true;
    for (int d = 0; d < dim; ++d) finite &= bf16_is_finite(row[h * dim + d]);
    stats.nonfinite_heads += !finite;
  }
  std::memcpy(record, row, layout.payload_bytes);
  zero_tail(layout, record);
}

void decode_bf16(const RecordLayout& layout, const std::byte* record, uint16_t* row) {
  std::memcpy(row, record, layout.payload_bytes);
}

// ---- int8 and fp8: one scale per head ---------------------------------------

template <bool kFp8>
void encode_per_head(const RecordLayout& layout, const uint16_t* row, std::byte* record, CodecStats& stats) {
  const int heads = layout.shape.num_heads, dim = layout.shape.head_dim;
  auto* codes = reinterpret_cast<uint8_t*>(record);
  for (int h = 0; h < heads; ++h) {
    const uint16_t* x = row + h * dim;
    uint8_t* q = codes + h * dim;
    float amax;
    if (!finite_amax(x, dim, amax)) {
      ++stats.nonfinite_heads;
      std::memset(q, 0, dim);
      store_scale(record, layout, h, kBf16QuietNan);
      continue;
    }
    const uint16_t scale_bits = scale_for(amax, kFp8 ? 448.0f : 127.0f);
    const float scale = bf16_to_float(scale_bits);
    for (int d = 0; d < dim; ++d) {
      const float v = bf16_to_float(x[d]) / scale;
      if constexpr (kFp8) {
        q[d] = float_to_e4m3(v);
      } else {
        q[d] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(std::nearbyint(v), -127.0f, 127.0f)));
      }
    }
    store_scale(record, layout, h, scale_bits);
  }
  zero_tail(layout, record);
}

template <bool kFp8>
void decode_per_head(const RecordLayout& layout, const std::byte* record, uint16_t* row) {
  const int heads = layout.shape.num_heads, dim = layout.shape.head_dim;
  const auto* codes = reinterpret_cast<const uint8_t*>(record);
  for (int h = 0; h < heads; ++h) {
    const float scale = bf16_to_float(load_scale(record, layout, h));
    for (int d = 0; d < dim; ++d) {
      const uint8_t c = codes[h * dim + d];
      const float q = kFp8 ? e4m3_to_float(c) : static_cast<float>(static_cast<int8_t>(c));
      row[h * dim + d] = float_to_bf16_saturate(q * scale);
    }
  }
}

// ---- int4 and int4h: one scale per group of 32 -------------------------------

void put_nibble(uint8_t* payload, size_t i, uint8_t nibble) {
  payload[i >> 1] = static_cast<uint8_t>(payload[i >> 1] | (nibble << ((i & 1) * 4)));
}
int get_code(const uint8_t* payload, size_t i) { return ((payload[i >> 1] >> ((i & 1) * 4)) & 0xF) - 8; }

// Codes stored offset by 8: q ∈ [-7, 7] is stored as q + 8 ∈ [1, 15].
void quantize_int4_head(const RecordLayout& layout, int h, const float* v, std::byte* record) {
  const int dim = layout.shape.head_dim;
  auto* payload = reinterpret_cast<uint8_t*>(record);
  for (int g = 0; g < layout.groups_per_head; ++g) {
    const int begin = g * kInt4GroupSize, end = std::min(dim, begin + kInt4GroupSize);
    float amax = 0.0f;
    for (int d = begin; d < end; ++d) amax = std::max(amax, std::fabs(v[d]));
    const uint16_t scale_bits = scale_for(amax, 7.0f);
    const float scale = bf16_to_float(scale_bits);
    for (int d = begin; d < end; ++d) {
      const float q = std::clamp(std::nearbyint(v[d] / scale), -7.0f, 7.0f);
      put_nibble(payload, static_cast<size_t>(h) * dim + d, static_cast<uint8_t>(static_cast<int>(q) + 8));
    }
    store_scale(record, layout, static_cast<size_t>(h) * layout.groups_per_head + g, scale_bits);
  }
}

void mark_nan_head(const RecordLayout& layout, int h, std::byte* record) {
  const int dim = layout.shape.head_dim;
  auto* payload = reinterpret_cast<uint8_t*>(record);
  for (int d = 0; d < dim; ++d) put_nibble(payload, static_cast<size_t>(h) * dim + d, 8);
  for (int g = 0; g < layout.groups_per_head; ++g)
    store_scale(record, layout, static_cast<size_t>(h) * layout.groups_per_head + g, kBf16QuietNan);
}

template <bool kRotate>
void encode_int4(const RecordLayout& layout, const uint16_t* row, std::byte* record, CodecStats& stats) {
  const int heads = layout.shape.num_heads, dim = layout.shape.head_dim;
  std::memset(record, 0, layout.payload_bytes);
  float v[kMaxHeadDim];
  for (int h = 0; h < heads; ++h) {
    const uint16_t* x = row + h * dim;
    float amax;
    if (!finite_amax(x, dim, amax)) {
      ++stats.nonfinite_heads;
      mark_nan_head(layout, h, record);
      continue;
    }
    if (kRotate && amax >= kInt4HMaxAbs) {
      ++stats.out_of_range_heads;
      mark_nan_head(layout, h, record);
      continue;
    }
    for (int d = 0; d < dim; ++d) v[d] = bf16_to_float(x[d]);
    if constexpr (kRotate) hadamard_transform(v, dim);
    quantize_int4_head(layout, h, v, record);
  }
  zero_tail(layout, record);
}

template <bool kRotate>
void decode_int4(const RecordLayout& layout, const std::byte* record, uint16_t* row) {
  const int heads = layout.shape.num_heads, dim = layout.shape.head_dim;
  const auto* payload = reinterpret_cast<const uint8_t*>(record);
  float v[kMaxHeadDim];
  for (int h = 0; h < heads; ++h) {
    for (int d = 0; d < dim; ++d) {
      const float scale =
          bf16_to_float(load_scale(record, layout, static_cast<size_t>(h) * layout.groups_per_head + d / kInt4GroupSize));
      v[d] = static_cast<float>(get_code(payload, static_cast<size_t>(h) * dim + d)) * scale;
    }
    if constexpr (kRotate) hadamard_transform(v, dim);
    for (int d = 0; d < dim; ++d) row[h * dim + d] = float_to_bf16_saturate(v[d]);
  }
}

}  // namespace

const KernelTable& scalar_kernels() {
  static const KernelTable table{
      {encode_bf16, encode_per_head<false>, encode_per_head<true>, encode_int4<false>, encode_int4<true>},
      {decode_bf16, decode_per_head<false>, decode_per_head<true>, decode_int4<false>, decode_int4<true>},
  };
  return table;
}

}  // namespace hiq::codec_detail
