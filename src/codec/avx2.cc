// codec/avx2.cc — AVX2 + F16C kernels, compiled with -mavx2 -mf16c and only
// called after a run-time CPU check. They handle head_dim % 8 == 0 and mirror the
// scalar reference operation for operation (IEEE division, round-to-nearest-even,
// the same Hadamard butterfly order), so their output is bit-identical.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "codec/kernels.h"
#include "codec/numeric.h"

// Only the kernels are compiled for the wider instruction set: the headers
// above (whose inline functions the linker may share with other files) and the
// table accessor at the bottom stay baseline x86-64, so nothing here can run an
// unsupported instruction before the CPU check in codec.cc.
#pragma GCC push_options
#pragma GCC target("avx2,f16c")

namespace hiq::codec_detail {
namespace {

using namespace numeric;

// ---- vector helpers ------------------------------------------------------------

inline __m256 load_bf16x8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline __m256 abs_ps(__m256 v) { return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))); }

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

// float_to_bf16 of 16 lanes known to be finite and to stay finite after
// rounding (no NaN, no overflow): the common case of a decoder, five integer
// operations per 8 lanes. Stores 16 BF16 at p.
inline __m256i round_to_bf16_bits(__m256 f) {
  const __m256i u = _mm256_castps_si256(f);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  return _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
}
// float_to_bf16_saturate of 8 lanes (numeric.h): round to nearest even, a
// finite lane that rounds to ±Inf becomes ±0x7F7F, NaN becomes 0x7FC0.
inline void store_bf16x8_saturate(uint16_t* p, __m256 f) {
  const __m256i r = round_to_bf16_bits(f);
  __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  const auto narrow = [](__m256 mask) {
    const __m256i m = _mm256_castps_si256(mask);
    return _mm_packs_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  };
  const __m128i finite = narrow(_mm256_cmp_ps(abs_ps(f), _mm256_set1_ps(std::numeric_limits<float>::infinity()), _CMP_LT_OQ));
  const __m128i is_nan = narrow(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
  const __m128i overflowed = _mm_and_si128(_mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7FFF)), _mm_set1_epi16(0x7F80)), finite);
  h = _mm_xor_si128(h, _mm_and_si128(overflowed, _mm_set1_epi16(0x00FF)));  // ±0x7F80 → ±0x7F7F
  h = _mm_blendv_epi8(h, _mm_set1_epi16(static_cast<short>(kBf16QuietNan)), is_nan);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
}

// Narrows 8 int32 lanes holding 0..255 to 8 bytes at p.
inline void store_u8x8(uint8_t* p, __m256i v) {
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packus_epi16(w, w));
}

inline __m256 round_even(__m256 v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

// The largest magnitude bits (bits & 0x7FFF) among `dim` bf16 values. For
// finite BF16, |x| orders exactly like these integers, and every NaN or ±Inf has
// magnitude bits ≥ 0x7F80: one integer max gives both the amax and the check.
inline uint16_t max_magnitude_bits(const uint16_t* x, int dim) {
  const __m256i magnitude_mask = _mm256_set1_epi16(0x7FFF);
  __m256i wide = _mm256_setzero_si256();
  int d = 0;
  for (; d + 16 <= dim; d += 16)
    wide = _mm256_max_epu16(wide, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + d)),
                                                   magnitude_mask));
  __m128i m = _mm_max_epu16(_mm256_castsi256_si128(wide), _mm256_extracti128_si256(wide, 1));
  for (; d < dim; d += 8)
    m = _mm_max_epu16(m, _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + d)),
                                       _mm256_castsi256_si128(magnitude_mask)));
  // Horizontal max as the complement of the minimum of the complements.
  const __m128i complement = _mm_xor_si128(m, _mm_set1_epi16(-1));
  return static_cast<uint16_t>(0xFFFF ^ (_mm_cvtsi128_si32(_mm_minpos_epu16(complement)) & 0xFFFF));
}


// max |x| of a head; false when it holds a NaN or ±Inf.
bool finite_amax(const uint16_t* x, int dim, float& amax) {
  const uint16_t bits = max_magnitude_bits(x, dim);
  amax = bf16_to_float(bits);
  return magnitude_is_finite(bits);
}

inline void store_bf16x16_finite(uint16_t* p, __m256 lo, __m256 hi) {
  const __m256i packed = _mm256_packus_epi32(round_to_bf16_bits(lo), round_to_bf16_bits(hi));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_permute4x64_epi64(packed, 0xD8));
}

// True when every code times `scale` rounds to a finite BF16 with no NaN: then a
// decoder may take the fast rounding path. `max_code` bounds |code|.
inline bool fast_decode_safe(float scale, float max_code) {
  return std::fabs(scale) * max_code <= bf16_to_float(0x7F7F);  // false for NaN too
}

// ---- bf16 ------------------------------------------------------------------------

void encode_bf16(const RecordLayout& layout, const uint16_t* row, std::byte* record, CodecStats& stats) {
  const int heads = layout.shape.num_heads, dim = layout.shape.head_dim;
  for (int h = 0; h < heads; ++h) stats.nonfinite_heads += !magnitude_is_finite(max_magnitude_bits(row + h * dim, dim));
  std::memcpy(record, row, layout.payload_bytes);
  zero_tail(layout, record);
}

void decode_bf16(const RecordLayout& layout, const std::byte* record, uint16_t* row) {
  std::memcpy(row, record, layout.payload_bytes);
}

// ---- int8 and fp8 ----------------------------------------------------------------

// float_to_e4m3 of 8 finite lanes whose magnitude is below 2^31 (always true of x/s).
inline __m256i float_to_e4m3x8(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
  const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i sub =
      _mm256_cvtps_epi32(round_even(_mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(512.0f))));
  const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(a, _mm256_set1_epi32(0x7FFFF)),
                                           _mm256_and_si256(_mm256_srli_epi32(a, 20), _mm256_set1_epi32(1)));
  const __m256i normal = _mm256_sub_epi32(_mm256_srli_epi32(rounded, 20), _mm256_set1_epi32(120 << 3));
  __m256i r = _mm256_blendv_epi8(normal, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3C800000), a));
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7E), _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x43DFFFFF)));
  return _mm256_or_si256(r, sign);
}

// e4m3_to_float of 8 codes: an E4M3 code shifted into an FP16 is the same number
// times 2^-8 (exponent bias 15 vs 7), subnormals included; 0x7F/0xFF are NaN.
inline __m256 e4m3x8_to_float(const uint8_t* p) {
  const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m128i magnitude = _mm_and_si128(b, _mm_set1_epi16(0x7F));
  const __m128i half = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8),
                                    _mm_slli_epi16(magnitude, 7));
  const __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(half), _mm256_set1_ps(256.0f));
  const __m256i is_nan = _mm256_cvtepi16_epi32(_mm_cmpeq_epi16(magnitude, _mm_set1_epi16(0x7F)));
  return _mm256_blendv_ps(v, _mm256_set1_ps(std::nanf("")), _mm256_castsi256_ps(is_nan));
}

// q = clamp(rint(x / scale), -127, 127) for a head. cvtps2dq rounds to nearest
// even (the default MXCSR mode, as std::nearbyint assumes); the upper clamp is
// the saturation of packsswb.
inline void quantize_int8(const uint16_t* x, int dim, __m256 scale, uint8_t* q) {
  const __m256i lowest = _mm256_set1_epi16(-127);
  int d = 0;
  for (; d + 16 <= dim; d += 16) {
    // Interleaving with zeros widens BF16 to float in place (bits << 16): lane
    // halves hold elements 0-3 | 8-11 (lo) and 4-7 | 12-15 (hi), which packs
    // back into order.
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + d));
    const __m256 lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), bits));
    const __m256 hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), bits));
    const __m256i a = _mm256_cvtps_epi32(_mm256_div_ps(lo, scale));
    const __m256i b = _mm256_cvtps_epi32(_mm256_div_ps(hi, scale));
    const __m256i words = _mm256_max_epi16(_mm256_packs_epi32(a, b), lowest);  // 0-7 | 8-15
    const __m256i bytes = _mm256_packs_epi16(words, words);                     // 0-7 0-7 | 8-15 8-15
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + d), _mm256_castsi256_si128(_mm256_permute4x64_epi64(bytes, 0x08)));
  }
  for (; d < dim; d += 8) {
    const __m256i a = _mm256_cvtps_epi32(_mm256_div_ps(load_bf16x8(x + d), scale));
    const __m128i w = _mm_max_epi16(_mm_packs_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1)),
                                    _mm256_castsi256_si128(lowest));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + d), _mm_packs_epi16(w, w));
  }
}

template <bool kFp8>
void encode_per_head(const RecordLayout& layout, const uint16_t* row, std::byte* record, CodecStats& stats) {
  const int heads = layout.shape.num_heads, dim = layout.shape.head_dim;
  auto* codes = reinterpret_cast<uint8_t*>(record);
  // Scales of a batch of heads first, then their codes: the serial chain from a
  // head's amax to its scale then overlaps with independent work instead of
  // holding up that head's divisions.
  constexpr int kBatch = 16;
  uint16_t scale_bits[kBatch];
  for (int first = 0; first < heads; first += kBatch) {
    const int last = std::min(heads, first + kBatch);
    for (int h = first; h < last; ++h) {
      const uint16_t magnitude = max_magnitude_bits(row + h * dim, dim);
      scale_bits[h - first] = magnitude_is_finite(magnitude)
                                  ? scale_for(bf16_to_float(magnitude), kFp8 ? 448.0f : 127.0f)
                                  : kBf16QuietNan;
    }
    for (int h = first; h < last; ++h) {
      const uint16_t* x = row + h * dim;
      uint8_t* q = codes + h * dim;
      store_scale(record, layout, h, scale_bits[h - first]);
      if (scale_bits[h - first] == kBf16QuietNan) {  // a finite amax never gives a NaN scale
        ++stats.nonfinite_heads;
        std::memset(q, 0, dim);
        continue;
      }
      const __m256 scale = _mm256_set1_ps(bf16_to_float(scale_bits[h - first]));
      if constexpr (kFp8) {
        for (int d = 0; d < dim; d += 8) store_u8x8(q + d, float_to_e4m3x8(_mm256_div_ps(load_bf16x8(x + d), scale)));
      } else {
        quantize_int8(x, dim, scale, q);
      }
    }
  }
  zero_tail(layout, record);
}

inline __m256 int8x8_to_float(const uint8_t* c) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c))));
}

template <bool kFp8>
void decode_per_head(const RecordLayout& layout, const std::byte* record, uint16_t* row) {
  const int heads = layout.shape.num_heads, dim = layout.shape.head_dim;
  const auto* codes = reinterpret_cast<const uint8_t*>(record);
  for (int h = 0; h < heads; ++h) {
    const float s = bf16_to_float(load_scale(record, layout, h));
    const __m256 scale = _mm256_set1_ps(s);
    const uint8_t* c = codes + h * dim;
    uint16_t* out = row + h * dim;
    int d = 0;
    if (!kFp8 && fast_decode_safe(s, 128.0f)) {
      for (; d + 16 <= dim; d += 16)
        store_bf16x16_finite(out + d, _mm256_mul_ps(int8x8_to_float(c + d), scale),
                             _mm256_mul_ps(int8x8_to_float(c + d + 8), scale));
    }
    for (; d < dim; d += 8) {
      const __m256 q = kFp8 ? e4m3x8_to_float(c + d) : int8x8_to_float(c + d);
      store_bf16x8_saturate(out + d, _mm256_mul_ps(q, scale));
    }
  }
}

// ---- int4 and int4h ----------------------------------------------------------------

// The butterfly a±b of lanes `span` apart within one vector (span 1, 2, 4):
// low lanes get a + b, high lanes b' − a' where b' is the partner, i.e. a − b.
template <int kSpan>
inline __m256 butterfly_in_vector(__m256 v) {
  __m256 partner;
  if constexpr (kSpan == 1) partner = _mm256_permute_ps(v, 0xB1);
  else if constexpr (kSpan == 2) partner = _mm256_permute_ps(v, 0x4E);
  else partner = _mm256_permute2f128_ps(v, v, 1);
  constexpr int kHighLanes = kSpan == 1 ? 0xAA : kSpan == 2 ? 0xCC : 0xF0;
  return _mm256_blend_ps(_mm256_add_ps(v, partner), _mm256_sub_ps(partner, v), kHighLanes);
}

// codec_detail::hadamard_transform for n a power of two ≥ 8, same operation order.
void hadamard_transform_avx2(float* v, int n) {
  const int vectors = n / 8;
  for (int i = 0; i < vectors; ++i) {
    __m256 x = _mm256_loadu_ps(v + 8 * i);
    x = butterfly_in_vector<1>(x);
    x = butterfly_in_vector<2>(x);
    x = butterfly_in_vector<4>(x);
    _mm256_storeu_ps(v + 8 * i, x);
  }
  for (int span = 1; span < vectors; span <<= 1) {
    for (int i = 0; i < vectors; i += 2 * span) {
      for (int j = i; j < i + span; ++j) {
        const __m256 a = _mm256_loadu_ps(v + 8 * j), b = _mm256_loadu_ps(v + 8 * (j + span));
        _mm256_storeu_ps(v + 8 * j, _mm256_add_ps(a, b));
        _mm256_storeu_ps(v + 8 * (j + span), _mm256_sub_ps(a, b));
      }
    }
  }
  const __m256 norm = _mm256_set1_ps(hadamard_norm(n));
  for (int i = 0; i < n; i += 8) _mm256_storeu_ps(v + i, _mm256_mul_ps(_mm256_loadu_ps(v + i), norm));
}

// Packs 8 codes (1..15, in int32 lanes) into 4 bytes, element 2i in the low nibble.
inline uint32_t pack_nibbles(__m256i codes) {
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(codes), _mm256_extracti128_si256(codes, 1));
  const __m128i bytes = _mm_packus_epi16(w, w);  // 8 bytes, each pair forms a 16-bit lane
  const __m128i pairs = _mm_or_si128(_mm_and_si128(bytes, _mm_set1_epi16(0x000F)),
                                     _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi16(0x00F0)));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(_mm_packus_epi16(pairs, pairs)));
}

// 8 codes of 4 bytes → 8 signed values as floats.
inline __m256 unpack_nibbles(const uint8_t* p) {
  uint32_t packed;
  std::memcpy(&packed, p, 4);
  const __m128i b = _mm_cvtsi32_si128(static_cast<int>(packed));
  const __m128i lo = _mm_and_si128(b, _mm_set1_epi8(0x0F));
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0F));
  const __m256i codes = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
  return _mm256_cvtepi32_ps(_mm256_sub_epi32(codes, _mm256_set1_epi32(8)));
}


template <bool kRotate>
void encode_int4(const RecordLayout& layout, const uint16_t* row, std::byte* record, CodecStats& stats) {
  const int heads = layout.shape.num_heads, dim = layout.shape.head_dim;
  auto* payload = reinterpret_cast<uint8_t*>(record);
  alignas(32) float v[kMaxHeadDim];
  for (int h = 0; h < heads; ++h) {
    const uint16_t* x = row + h * dim;
    float amax;
    if (!finite_amax(x, dim, amax)) {
      ++stats.nonfinite_heads;
      mark_nan_int4_head(layout, h, record);
      continue;
    }
    if (kRotate && amax >= kInt4HMaxAbs) {
      ++stats.out_of_range_heads;
      mark_nan_int4_head(layout, h, record);
      continue;
    }
    for (int d = 0; d < dim; d += 8) _mm256_store_ps(v + d, load_bf16x8(x + d));
    if constexpr (kRotate) hadamard_transform_avx2(v, dim);
    for (int g = 0; g < layout.groups_per_head; ++g) {
      const int begin = g * kInt4GroupSize, end = std::min(dim, begin + kInt4GroupSize);
      __m256 vmax = _mm256_setzero_ps();
      for (int d = begin; d < end; d += 8) vmax = _mm256_max_ps(vmax, abs_ps(_mm256_load_ps(v + d)));
      const uint16_t scale_bits = scale_for(hmax(vmax), 7.0f);
      const __m256 scale = _mm256_set1_ps(bf16_to_float(scale_bits));
      for (int d = begin; d < end; d += 8) {
        const __m256 q = _mm256_min_ps(_mm256_max_ps(round_even(_mm256_div_ps(_mm256_load_ps(v + d), scale)),
                                                     _mm256_set1_ps(-7.0f)),
                                       _mm256_set1_ps(7.0f));
        const uint32_t packed = pack_nibbles(_mm256_add_epi32(_mm256_cvtps_epi32(q), _mm256_set1_epi32(8)));
        std::memcpy(payload + (static_cast<size_t>(h) * dim + d) / 2, &packed, 4);
      }
      store_scale(record, layout, static_cast<size_t>(h) * layout.groups_per_head + g, scale_bits);
    }
  }
  zero_tail(layout, record);
}

template <bool kRotate>
void decode_int4(const RecordLayout& layout, const std::byte* record, uint16_t* row) {
  const int heads = layout.shape.num_heads, dim = layout.shape.head_dim;
  const auto* payload = reinterpret_cast<const uint8_t*>(record);
  alignas(32) float v[kMaxHeadDim];
  for (int h = 0; h < heads; ++h) {
    for (int d = 0; d < dim; d += 8) {
      const size_t g = static_cast<size_t>(h) * layout.groups_per_head + d / kInt4GroupSize;
      const __m256 scale = _mm256_set1_ps(bf16_to_float(load_scale(record, layout, g)));
      const __m256 y = _mm256_mul_ps(unpack_nibbles(payload + (static_cast<size_t>(h) * dim + d) / 2), scale);
      if constexpr (kRotate) {
        _mm256_store_ps(v + d, y);
      } else {
        store_bf16x8_saturate(row + h * dim + d, y);
      }
    }
    if constexpr (kRotate) {
      hadamard_transform_avx2(v, dim);
      for (int d = 0; d < dim; d += 8) store_bf16x8_saturate(row + h * dim + d, _mm256_load_ps(v + d));
    }
  }
}

}  // namespace
}  // namespace hiq::codec_detail

#pragma GCC pop_options

namespace hiq::codec_detail {

const KernelTable* avx2_kernels() {
  static const KernelTable table{
      {encode_bf16, encode_per_head<false>, encode_per_head<true>, encode_int4<false>, encode_int4<true>},
      {decode_bf16, decode_per_head<false>, decode_per_head<true>, decode_int4<false>, decode_int4<true>},
  };
  return &table;
}

}  // namespace hiq::codec_detail
