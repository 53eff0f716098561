// codec/avx512.cc — AVX-512 (F + BW) kernels, compiled with -mavx512f -mavx512bw
// and only called after a run-time CPU check. 16 float lanes; heads with
// head_dim % 16 == 0. Like the AVX2 kernels they mirror the scalar reference
// operation for operation, so their output is bit-identical to it.
//
// (The BF16 instructions of AVX512_BF16 are not used: VCVTNEPS2BF16 flushes
// subnormals, which the formats keep.)
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
#pragma GCC target("avx512f,avx512bw,avx2,f16c")

namespace hiq::codec_detail {
namespace {

using namespace numeric;

// ---- vector helpers ----------------------------------------------------------------

inline __m512 load_bf16x16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

inline __m512 abs_ps(__m512 v) { return _mm512_abs_ps(v); }

// float_to_bf16_saturate of 16 lanes (numeric.h): round to nearest even, a
// finite lane that rounds past the largest BF16 becomes ±0x7F7F, NaN becomes 0x7FC0.
inline void store_bf16x16_saturate(uint16_t* p, __m512 f) {
  const __m512i u = _mm512_castps_si512(f);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb), 16);
  const __mmask16 finite = _mm512_cmp_ps_mask(abs_ps(f), _mm512_set1_ps(std::numeric_limits<float>::infinity()), _CMP_LT_OQ);
  const __mmask16 overflowed =
      _mm512_cmpeq_epi32_mask(_mm512_and_si512(r, _mm512_set1_epi32(0x7FFF)), _mm512_set1_epi32(0x7F80));
  r = _mm512_mask_xor_epi32(r, overflowed & finite, r, _mm512_set1_epi32(0x00FF));  // ±0x7F80 → ±0x7F7F
  r = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q), r, _mm512_set1_epi32(kBf16QuietNan));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
}

// The same for lanes known finite with no overflow: the common decoder case.
inline void store_bf16x16_finite(uint16_t* p, __m512 f) {
  const __m512i u = _mm512_castps_si512(f);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb), 16);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
}

inline bool fast_decode_safe(float scale, float max_code) {
  return std::fabs(scale) * max_code <= bf16_to_float(0x7F7F);  // false for NaN too
}

// Largest magnitude bits (bits & 0x7FFF) of a head: the amax and, when
// ≥ 0x7F80, the sign of a NaN/Inf (as in the AVX2 kernels).
inline uint16_t max_magnitude_bits(const uint16_t* x, int dim) {
  const __m512i mask = _mm512_set1_epi16(0x7FFF);
  __m512i wide = _mm512_setzero_si512();
  int d = 0;
  for (; d + 32 <= dim; d += 32)
    wide = _mm512_max_epu16(wide, _mm512_and_si512(_mm512_loadu_si512(x + d), mask));
  __m256i m = _mm256_max_epu16(_mm512_castsi512_si256(wide), _mm512_extracti64x4_epi64(wide, 1));
  for (; d < dim; d += 16)
    m = _mm256_max_epu16(m, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + d)),
                                             _mm512_castsi512_si256(mask)));
  const __m128i m128 = _mm_max_epu16(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  const __m128i complement = _mm_xor_si128(m128, _mm_set1_epi16(-1));
  return static_cast<uint16_t>(0xFFFF ^ (_mm_cvtsi128_si32(_mm_minpos_epu16(complement)) & 0xFFFF));
}


// ---- int8 and fp8 ------------------------------------------------------------------

// float_to_e4m3 of 16 finite lanes (|v| < 2^31), as bytes.
inline __m128i float_to_e4m3x16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80));
  const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
  const __m512i sub = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(512.0f)),
                                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  const __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32(0x7FFFF)),
                                           _mm512_and_si512(_mm512_srli_epi32(a, 20), _mm512_set1_epi32(1)));
  __m512i r = _mm512_sub_epi32(_mm512_srli_epi32(rounded, 20), _mm512_set1_epi32(120 << 3));
  r = _mm512_mask_blend_epi32(_mm512_cmplt_epi32_mask(a, _mm512_set1_epi32(0x3C800000)), r, sub);
  r = _mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x43DFFFFF)), r, _mm512_set1_epi32(0x7E));
  return _mm512_cvtepi32_epi8(_mm512_or_si512(r, sign));
}

// e4m3_to_float of 16 codes via FP16 (see avx2.cc); 0x7F/0xFF are NaN.
inline __m512 e4m3x16_to_float(const uint8_t* p) {
  const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i magnitude = _mm256_and_si256(b, _mm256_set1_epi16(0x7F));
  const __m256i half = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8),
                                       _mm256_slli_epi16(magnitude, 7));
  const __m512 v = _mm512_mul_ps(_mm512_cvtph_ps(half), _mm512_set1_ps(256.0f));
  const __mmask16 is_nan = _mm512_cmpeq_epi32_mask(_mm512_cvtepu16_epi32(magnitude), _mm512_set1_epi32(0x7F));
  return _mm512_mask_blend_ps(is_nan, v, _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
}

template <bool kFp8>
void encode_per_head(const RecordLayout& layout, const uint16_t* row, std::byte* record, CodecStats& stats) {
  const int heads = layout.shape.num_heads, dim = layout.shape.head_dim;
  auto* codes = reinterpret_cast<uint8_t*>(record);
  constexpr int kBatch = 16;  // scales of a batch of heads first (see avx2.cc)
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
      if (scale_bits[h - first] == kBf16QuietNan) {
        ++stats.nonfinite_heads;
        std::memset(q, 0, dim);
        continue;
      }
      const __m512 scale = _mm512_set1_ps(bf16_to_float(scale_bits[h - first]));
      for (int d = 0; d < dim; d += 16) {
        const __m512 v = _mm512_div_ps(load_bf16x16(x + d), scale);
        __m128i bytes;
        if constexpr (kFp8) {
          bytes = float_to_e4m3x16(v);
        } else {  // cvtps2dq rounds to nearest even; vpmovsdb saturates at 127
          bytes = _mm512_cvtsepi32_epi8(_mm512_max_epi32(_mm512_cvtps_epi32(v), _mm512_set1_epi32(-127)));
        }
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + d), bytes);
      }
    }
  }
  zero_tail(layout, record);
}

template <bool kFp8>
void decode_per_head(const RecordLayout& layout, const std::byte* record, uint16_t* row) {
  const int heads = layout.shape.num_heads, dim = layout.shape.head_dim;
  const auto* codes = reinterpret_cast<const uint8_t*>(record);
  for (int h = 0; h < heads; ++h) {
    const float s = bf16_to_float(load_scale(record, layout, h));
    const __m512 scale = _mm512_set1_ps(s);
    const uint8_t* c = codes + h * dim;
    uint16_t* out = row + h * dim;
    const bool fast = !kFp8 && fast_decode_safe(s, 128.0f);
    for (int d = 0; d < dim; d += 16) {
      const __m512 q = kFp8 ? e4m3x16_to_float(c + d)
                            : _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + d))));
      if (fast) {
        store_bf16x16_finite(out + d, _mm512_mul_ps(q, scale));
      } else {
        store_bf16x16_saturate(out + d, _mm512_mul_ps(q, scale));
      }
    }
  }
}

// ---- int4 and int4h --------------------------------------------------------------------

// Butterflies of lanes `span` apart inside one vector (span 1, 2, 4, 8): low lanes
// get a + b, high lanes partner − self = a − b.
template <int kSpan>
inline __m512 butterfly_in_vector(__m512 v) {
  __m512 partner;
  if constexpr (kSpan == 1) partner = _mm512_permute_ps(v, 0xB1);
  else if constexpr (kSpan == 2) partner = _mm512_permute_ps(v, 0x4E);
  else if constexpr (kSpan == 4) partner = _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1));
  else partner = _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2));
  constexpr __mmask16 kHigh = kSpan == 1 ? 0xAAAA : kSpan == 2 ? 0xCCCC : kSpan == 4 ? 0xF0F0 : 0xFF00;
  return _mm512_mask_blend_ps(kHigh, _mm512_add_ps(v, partner), _mm512_sub_ps(partner, v));
}

// codec_detail::hadamard_transform for n a power of two ≥ 16, same operation order.
void hadamard_transform_avx512(float* v, int n) {
  const int vectors = n / 16;
  for (int i = 0; i < vectors; ++i) {
    __m512 x = _mm512_loadu_ps(v + 16 * i);
    x = butterfly_in_vector<1>(x);
    x = butterfly_in_vector<2>(x);
    x = butterfly_in_vector<4>(x);
    x = butterfly_in_vector<8>(x);
    _mm512_storeu_ps(v + 16 * i, x);
  }
  for (int span = 1; span < vectors; span <<= 1) {
    for (int i = 0; i < vectors; i += 2 * span) {
      for (int j = i; j < i + span; ++j) {
        const __m512 a = _mm512_loadu_ps(v + 16 * j), b = _mm512_loadu_ps(v + 16 * (j + span));
        _mm512_storeu_ps(v + 16 * j, _mm512_add_ps(a, b));
        _mm512_storeu_ps(v + 16 * (j + span), _mm512_sub_ps(a, b));
      }
    }
  }
  const __m512 norm = _mm512_set1_ps(hadamard_norm(n));
  for (int i = 0; i < n; i += 16) _mm512_storeu_ps(v + i, _mm512_mul_ps(_mm512_loadu_ps(v + i), norm));
}

// 16 codes (1..15 in int32 lanes) → 8 bytes, element 2i in the low nibble.
inline uint64_t pack_nibbles(__m512i codes) {
  const __m128i bytes = _mm512_cvtepi32_epi8(codes);
  const __m128i pairs = _mm_or_si128(_mm_and_si128(bytes, _mm_set1_epi16(0x000F)),
                                     _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi16(0x00F0)));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_packus_epi16(pairs, pairs)));
}

// 8 bytes → 16 signed codes as floats.
inline __m512 unpack_nibbles(const uint8_t* p) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i lo = _mm_and_si128(b, _mm_set1_epi8(0x0F));
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0F));
  const __m512i codes = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
  return _mm512_cvtepi32_ps(_mm512_sub_epi32(codes, _mm512_set1_epi32(8)));
}


// The codes of 16 values under `scale`: rint(v / scale), clamped to ±7, stored + 8, packed.
inline uint64_t int4_codes(__m512 v, __m512 scale) {
  const __m512i q = _mm512_cvtps_epi32(_mm512_div_ps(v, scale));  // nearest even
  const __m512i clamped = _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(-7)), _mm512_set1_epi32(7));
  return pack_nibbles(_mm512_add_epi32(clamped, _mm512_set1_epi32(8)));
}

// One group of an int4 record: its scale, and its codes (clamped to ±7, stored + 8) packed.
inline void encode_int4_group(const __m512* v, int vectors, uint8_t* codes, std::byte* record,
                              const RecordLayout& layout, size_t group) {
  __m512 vmax = _mm512_setzero_ps();
  for (int i = 0; i < vectors; ++i) vmax = _mm512_max_ps(vmax, abs_ps(v[i]));
  const uint16_t scale_bits = scale_for(_mm512_reduce_max_ps(vmax), 7.0f);
  const __m512 scale = _mm512_set1_ps(bf16_to_float(scale_bits));
  for (int i = 0; i < vectors; ++i) {
    const uint64_t packed = int4_codes(v[i], scale);
    std::memcpy(codes + 8 * i, &packed, 8);
  }
  store_scale(record, layout, group, scale_bits);
}

// A 128-element head's four groups (kInt4GroupSize 32) at once: the four
// maxima reduced side by side, their scales computed in one vector as
// scale_for does one by one (the same max, division and rounding), so the
// groups share one dependency chain instead of four through scalar code.
inline void encode_int4_head_128(const __m512 (&x)[8], uint8_t* codes, std::byte* record, const RecordLayout& layout,
                                 size_t first_group) {
  static_assert(kInt4GroupSize == 32);
  __m512 m[4];
  for (int g = 0; g < 4; ++g) m[g] = _mm512_max_ps(abs_ps(x[2 * g]), abs_ps(x[2 * g + 1]));
  // Fold each m[g] into one 128-bit block (halves, then quarters), then the block's 4 lanes into each.
  const __m512 a01 = _mm512_max_ps(_mm512_shuffle_f32x4(m[0], m[1], 0x44), _mm512_shuffle_f32x4(m[0], m[1], 0xEE));
  const __m512 a23 = _mm512_max_ps(_mm512_shuffle_f32x4(m[2], m[3], 0x44), _mm512_shuffle_f32x4(m[2], m[3], 0xEE));
  __m512 amax = _mm512_max_ps(_mm512_shuffle_f32x4(a01, a23, 0x88), _mm512_shuffle_f32x4(a01, a23, 0xDD));
  amax = _mm512_max_ps(amax, _mm512_permute_ps(amax, 0x4E));
  amax = _mm512_max_ps(amax, _mm512_permute_ps(amax, 0xB1));  // lanes 4g … 4g + 3: group g's amax
  // scale_for: float_to_bf16(max(amax, kMinAmax) / 7), of a positive finite value.
  const __m512i u = _mm512_castps_si512(
      _mm512_div_ps(_mm512_max_ps(amax, _mm512_set1_ps(kMinAmax)), _mm512_set1_ps(7.0f)));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i bits = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb), 16);
  const __m512 scales = _mm512_castsi512_ps(_mm512_slli_epi32(bits, 16));
  for (int g = 0; g < 4; ++g) {
    const __m512 scale = _mm512_permutexvar_ps(_mm512_set1_epi32(4 * g), scales);
    const uint64_t packed[2] = {int4_codes(x[2 * g], scale), int4_codes(x[2 * g + 1], scale)};
    std::memcpy(codes + 16 * g, packed, 16);
  }
  alignas(64) uint32_t lanes[16];
  _mm512_store_si512(lanes, bits);
  for (int g = 0; g < 4; ++g) store_scale(record, layout, first_group + g, static_cast<uint16_t>(lanes[4 * g]));
}

// hadamard_transform_avx512 of a 128-element head held in eight vectors,
// with the same operations in the same order, never through memory.
inline void hadamard_128(__m512 (&x)[8]) {
  for (__m512& v : x) v = butterfly_in_vector<8>(butterfly_in_vector<4>(butterfly_in_vector<2>(butterfly_in_vector<1>(v))));
  for (int span = 1; span < 8; span <<= 1)
    for (int i = 0; i < 8; i += 2 * span)
      for (int j = i; j < i + span; ++j) {
        const __m512 a = x[j], b = x[j + span];
        x[j] = _mm512_add_ps(a, b);
        x[j + span] = _mm512_sub_ps(a, b);
      }
  const __m512 norm = _mm512_set1_ps(hadamard_norm(128));
  for (__m512& v : x) v = _mm512_mul_ps(v, norm);
}

template <bool kRotate>
void encode_int4(const RecordLayout& layout, const uint16_t* row, std::byte* record, CodecStats& stats) {
  const int heads = layout.shape.num_heads, dim = layout.shape.head_dim;
  auto* payload = reinterpret_cast<uint8_t*>(record);
  static_assert(kInt4GroupSize % 16 == 0);
  constexpr int kGroupVectors = kInt4GroupSize / 16;
  alignas(64) float v[kMaxHeadDim];
  for (int h = 0; h < heads; ++h) {
    const uint16_t* x = row + h * dim;
    const uint16_t magnitude = max_magnitude_bits(x, dim);
    if (!magnitude_is_finite(magnitude)) {
      ++stats.nonfinite_heads;
      mark_nan_int4_head(layout, h, record);
      continue;
    }
    if (kRotate && bf16_to_float(magnitude) >= kInt4HMaxAbs) {
      ++stats.out_of_range_heads;
      mark_nan_int4_head(layout, h, record);
      continue;
    }
    uint8_t* codes = payload + static_cast<size_t>(h) * dim / 2;
    const size_t first_group = static_cast<size_t>(h) * layout.groups_per_head;
    if (dim == 128) {  // Qwen3's and Llama's heads: the whole head in registers
      __m512 r[8];
      for (int i = 0; i < 8; ++i) r[i] = load_bf16x16(x + 16 * i);
      if constexpr (kRotate) hadamard_128(r);
      encode_int4_head_128(r, codes, record, layout, first_group);
      continue;
    }
    for (int d = 0; d < dim; d += 16) _mm512_store_ps(v + d, load_bf16x16(x + d));
    if constexpr (kRotate) hadamard_transform_avx512(v, dim);
    for (int g = 0; g < layout.groups_per_head; ++g) {
      const int begin = g * kInt4GroupSize, end = std::min(dim, begin + kInt4GroupSize);
      __m512 group[kGroupVectors];
      for (int d = begin; d < end; d += 16) group[(d - begin) / 16] = _mm512_load_ps(v + d);
      encode_int4_group(group, (end - begin) / 16, codes + begin / 2, record, layout, first_group + g);
    }
  }
  zero_tail(layout, record);
}

template <bool kRotate>
void decode_int4(const RecordLayout& layout, const std::byte* record, uint16_t* row) {
  const int heads = layout.shape.num_heads, dim = layout.shape.head_dim;
  const auto* payload = reinterpret_cast<const uint8_t*>(record);
  alignas(64) float v[kMaxHeadDim];
  for (int h = 0; h < heads; ++h) {
    for (int d = 0; d < dim; d += 16) {
      const size_t g = static_cast<size_t>(h) * layout.groups_per_head + d / kInt4GroupSize;
      const __m512 scale = _mm512_set1_ps(bf16_to_float(load_scale(record, layout, g)));
      const __m512 y = _mm512_mul_ps(unpack_nibbles(payload + (static_cast<size_t>(h) * dim + d) / 2), scale);
      if constexpr (kRotate) {
        _mm512_store_ps(v + d, y);
      } else {
        store_bf16x16_saturate(row + h * dim + d, y);
      }
    }
    if constexpr (kRotate) {
      hadamard_transform_avx512(v, dim);
      for (int d = 0; d < dim; d += 16) store_bf16x16_saturate(row + h * dim + d, _mm512_load_ps(v + d));
    }
  }
}

}  // namespace
}  // namespace hiq::codec_detail

#pragma GCC pop_options

namespace hiq::codec_detail {

const KernelTable* avx512_kernels() {
  static const KernelTable table = [] {
    KernelTable t{{nullptr, encode_per_head<false>, encode_per_head<true>, encode_int4<false>, encode_int4<true>},
                  {nullptr, decode_per_head<false>, decode_per_head<true>, decode_int4<false>, decode_int4<true>}};
    // bf16 is a copy plus a finiteness scan: the AVX2 kernel already runs at memory speed.
    t.encode[codec_index(CodecKind::kBf16)] = avx2_kernels()->encode[codec_index(CodecKind::kBf16)];
    t.decode[codec_index(CodecKind::kBf16)] = avx2_kernels()->decode[codec_index(CodecKind::kBf16)];
    return t;
  }();
  return &table;
}

}  // namespace hiq::codec_detail
