// codec/cuda/row_codec.cuh — the record formats on the GPU: one warp encodes
// one row into one record, or decodes one record into one row.
//
// The arithmetic is the scalar reference's (src/codec/scalar.cc) operation for
// operation: the same conversions (codec/numeric.h, compiled for the device),
// IEEE division and rint, explicit round-to-nearest adds and multiplies, and
// the file is built with -fmad=false so nothing is contracted into an FMA.
// Maxima are taken over magnitude bits, which is order-independent, so the
// warp-parallel reductions give the reference's values exactly. The GPU suite
// (tests/gpu_codec_test.cc) checks bytes and values against the CPU.
//
// Work area: a warp stages a record in shared memory (`rec`, record_bytes
// rounded up to 16) and, for the quantising codecs, the row as floats (`v`,
// elements × 4 bytes), so any alignment of rows and records is served: 16-byte
// accesses where the layout allows them, byte accesses otherwise.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "codec/codec.h"
#include "codec/numeric.h"

namespace hiq::cuda {

// A RecordLayout in the form kernels take by value (see device_layout()).
struct DeviceLayout {
  CodecKind codec = CodecKind::kBf16;
  int heads = 0, dim = 0, elements = 0;
  int groups_per_head = 0, num_scales = 0;
  int payload_bytes = 0, scale_offset = 0, used_bytes = 0, record_bytes = 0;
  float hadamard_norm = 0;      // int4h: numeric::hadamard_norm(dim)
  bool vector_rows = false;     // dim % 8 == 0: 8 elements (16 bytes) at a time, never across a head or group
  bool vector_records = false;  // record_bytes % 16 == 0: records move 16 bytes at a time
  // Vector rows: chunks of 8 elements per scale group (a head for int8/fp8,
  // 32 elements for int4), when every group has that many; 0 otherwise. When
  // it is a power of two ≤ 32, a group's chunks sit on adjacent lanes and its
  // maximum is a few shuffles; otherwise shared-memory atomics.
  int lanes_per_group = 0;
  // int8/fp8/int4 with head_dim = 32·k, k a power of two ≤ 32 (every model we
  // know): each lane owns 32 consecutive elements — one int4 group, a k-th of
  // a head — in registers, and a head's lanes are k adjacent lanes. 0: another path.
  int lanes_per_head = 0;
  // int4h with head_dim 64, 128 or 256: elements of a head per lane (2, 4, 8),
  // rotated in registers with shuffles. (The 32-a-lane path keeps 32 floats a
  // lane live, which costs int4h half its warps; this one keeps occupancy.)
  int fwht_per_lane = 0;
};

// The ways to encode or decode a row, fastest first.
enum class RowPath : uint8_t {
  kRotate,   // int4h, fwht_per_lane > 0: a head at a time, rotated in registers
  kLanes,    // lanes_per_head > 0 (not int4h): 32 elements a lane, in registers
  kVector,   // head_dim % 8 == 0: 16-byte chunks through shared memory (not int4h)
  kGeneric,  // anything: element by element, the row as floats in shared memory
};
__host__ __device__ inline RowPath row_path(const DeviceLayout& l) {
  if (l.codec == CodecKind::kInt4H) return l.fwht_per_lane > 0 ? RowPath::kRotate : RowPath::kGeneric;
  if (l.codec != CodecKind::kBf16 && l.lanes_per_head > 0) return RowPath::kLanes;
  if (l.vector_rows && l.codec != CodecKind::kInt4H) return RowPath::kVector;
  return RowPath::kGeneric;
}

__host__ __device__ inline size_t round16(size_t n) { return (n + 15) / 16 * 16; }

// Bytes between two lanes' 64-byte pieces of a decoded row in shared memory:
// 80, so the 16-byte stores of eight lanes fall in distinct banks.
inline constexpr size_t kLaneRowStride = 80;

// Shared memory one warp needs: the record, then the work area of
// `encode`/decode. A multiple of 16, so every warp's area is 16-byte aligned.
inline size_t warp_scratch_bytes(const DeviceLayout& l, bool encode) {
  const size_t rec = round16(static_cast<size_t>(l.record_bytes));
  const size_t elements = static_cast<size_t>(l.elements), scales = static_cast<size_t>(l.num_scales);
  if (l.codec == CodecKind::kBf16) return rec;
  switch (row_path(l)) {
    case RowPath::kRotate:  // encode: the row as BF16
      return rec + (encode ? round16(elements * 2) : 0);
    case RowPath::kLanes:  // decode: the row as BF16, 64 bytes a lane padded to 80 (no bank conflicts)
      return rec + (encode ? 0 : round16(elements / 32 * kLaneRowStride));
    case RowPath::kVector:  // encode: the row as BF16, group maxima, scales, reciprocals
      return rec + (encode ? round16(elements * 2) + round16(scales * 12) : 0);
    case RowPath::kGeneric: break;
  }
  // The row as floats (decode: int4h's rotation only).
  return rec + (encode || l.codec == CodecKind::kInt4H ? round16(elements * 4) : 0);
}

namespace device {

using numeric::bf16_to_float;

inline constexpr unsigned kFullMask = 0xFFFFFFFFu;
inline constexpr unsigned kFloatInfBits = 0x7F800000u;
inline constexpr uint16_t kScaleNan = numeric::kBf16QuietNan;

__device__ inline unsigned magnitude_bits(float f) { return __float_as_uint(f) & 0x7FFFFFFFu; }
__device__ inline unsigned warp_max(unsigned v) { return __reduce_max_sync(kFullMask, v); }
__device__ inline bool scale_is_nan(uint16_t bits) { return (bits & 0x7FFFu) > 0x7F80u; }

// The reference's scale_for(): bf16(max(amax, 2^-112) / qmax), IEEE division.
__device__ inline uint16_t scale_for(float amax, float qmax) {
  return numeric::float_to_bf16(__fdiv_rn(fmaxf(amax, numeric::kMinAmax), qmax));
}

// Copies `bytes` with the whole warp; `vec`: both pointers 16-byte aligned and
// bytes % 16 == 0. Four 16-byte loads per lane are issued before the stores,
// so a warp keeps 2 KB in flight: reads of pinned host memory over PCIe take
// microseconds, and only many reads in flight reach line rate.
__device__ inline void warp_copy(void* dst, const void* src, int bytes, bool vec, int lane) {
  if (vec) {
    auto* d = static_cast<uint4*>(dst);
    const auto* s = static_cast<const uint4*>(src);
    const int n = bytes / 16;
    for (int base = 0; base < n; base += 4 * 32) {
      uint4 r[4] = {};
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (const int i = base + k * 32 + lane; i < n) r[k] = s[i];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (const int i = base + k * 32 + lane; i < n) d[i] = r[k];
    }
  } else {
    auto* d = static_cast<uint8_t*>(dst);
    const auto* s = static_cast<const uint8_t*>(src);
    for (int i = lane; i < bytes; i += 32) d[i] = s[i];
  }
}

__device__ inline uint16_t load_scale(const uint8_t* rec, const DeviceLayout& l, int i) {
  return *reinterpret_cast<const uint16_t*>(rec + l.scale_offset + 2 * i);  // scale_offset is even
}
__device__ inline void store_scale(uint8_t* rec, const DeviceLayout& l, int i, uint16_t bits) {
  *reinterpret_cast<uint16_t*>(rec + l.scale_offset + 2 * i) = bits;
}

// Zeroes the gap after an odd payload and the padding after the last scale.
__device__ inline void zero_tail(uint8_t* rec, const DeviceLayout& l, int lane) {
  if (lane == 0 && l.num_scales > 0 && (l.payload_bytes & 1)) rec[l.payload_bytes] = 0;
  for (int i = l.used_bytes + lane; i < l.record_bytes; i += 32) rec[i] = 0;
}

// The fixed-order Walsh–Hadamard butterflies of codec/hadamard.h on one head
// (n a power of two), without the final normalisation. Each stage's
// butterflies are independent, so lanes take any of them.
__device__ inline void warp_fwht(float* v, int n, int lane) {
  for (int span = 1; span < n; span <<= 1) {
    for (int b = lane; b < n / 2; b += 32) {
      const int j = (b & ~(span - 1)) * 2 + (b & (span - 1));
      const float a = v[j], c = v[j + span];
      v[j] = __fadd_rn(a, c);
      v[j + span] = __fsub_rn(a, c);
    }
    __syncwarp();
  }
}

// Loads a BF16 row into `v` as floats (exact).
__device__ inline void load_row_as_float(const DeviceLayout& l, const uint16_t* row, float* v, int lane) {
  if (l.vector_rows) {
    for (int c = lane; c < l.elements / 8; c += 32) {
      const uint4 x = reinterpret_cast<const uint4*>(row)[c];
      const uint32_t w[4] = {x.x, x.y, x.z, x.w};
      float4 lo, hi;
      lo.x = bf16_to_float(static_cast<uint16_t>(w[0])), lo.y = bf16_to_float(static_cast<uint16_t>(w[0] >> 16));
      lo.z = bf16_to_float(static_cast<uint16_t>(w[1])), lo.w = bf16_to_float(static_cast<uint16_t>(w[1] >> 16));
      hi.x = bf16_to_float(static_cast<uint16_t>(w[2])), hi.y = bf16_to_float(static_cast<uint16_t>(w[2] >> 16));
      hi.z = bf16_to_float(static_cast<uint16_t>(w[3])), hi.w = bf16_to_float(static_cast<uint16_t>(w[3] >> 16));
      reinterpret_cast<float4*>(v)[2 * c] = lo;
      reinterpret_cast<float4*>(v)[2 * c + 1] = hi;
    }
  } else {
    for (int e = lane; e < l.elements; e += 32) v[e] = bf16_to_float(row[e]);
  }
}

// Largest magnitude (as float bits) over v[begin, end) of the warp.
__device__ inline unsigned warp_amax_bits(const float* v, int begin, int end, int lane) {
  unsigned m = 0;
  for (int i = begin + lane; i < end; i += 32) m = max(m, magnitude_bits(v[i]));
  return warp_max(m);
}

// ---- encode -------------------------------------------------------------------

struct EncodeCounts {
  unsigned nonfinite_heads = 0, out_of_range_heads = 0;  // kept by lane 0
};

__device__ inline int8_t quantize_int8(float x, float scale) {
  return static_cast<int8_t>(fminf(fmaxf(rintf(__fdiv_rn(x, scale)), -127.0f), 127.0f));
}
__device__ inline uint8_t quantize_nibble(float x, float scale) {  // stored q + 8
  return static_cast<uint8_t>(static_cast<int>(fminf(fmaxf(rintf(__fdiv_rn(x, scale)), -7.0f), 7.0f)) + 8);
}

// Per-head codecs: one scale per head (int8: qmax 127; fp8: E4M3, qmax 448).
template <CodecKind kCodec>
__device__ void encode_per_head(const DeviceLayout& l, const float* v, uint8_t* rec, EncodeCounts& counts, int lane) {
  constexpr bool kFp8 = kCodec == CodecKind::kFp8;
  for (int h = 0; h < l.heads; ++h) {
    const unsigned m = warp_amax_bits(v, h * l.dim, (h + 1) * l.dim, lane);
    const bool finite = m < kFloatInfBits;
    if (lane == 0) {
      counts.nonfinite_heads += !finite;
      store_scale(rec, l, h, finite ? scale_for(__uint_as_float(m), kFp8 ? 448.0f : 127.0f) : kScaleNan);
    }
  }
  __syncwarp();
  auto code = [&](float x, float scale) -> uint8_t {
    if constexpr (kFp8) return numeric::float_to_e4m3(__fdiv_rn(x, scale));
    return static_cast<uint8_t>(quantize_int8(x, scale));
  };
  if (l.vector_rows) {
    for (int c = lane; c < l.elements / 8; c += 32) {
      const int h = 8 * c / l.dim;
      const uint16_t bits = load_scale(rec, l, h);
      const float scale = bf16_to_float(bits);
      uint32_t w[2] = {0, 0};
      if (!scale_is_nan(bits)) {
#pragma unroll
        for (int k = 0; k < 8; ++k) w[k / 4] |= static_cast<uint32_t>(code(v[8 * c + k], scale)) << (8 * (k % 4));
      }
      reinterpret_cast<uint2*>(rec)[c] = make_uint2(w[0], w[1]);
    }
  } else {
    for (int e = lane; e < l.elements; e += 32) {
      const uint16_t bits = load_scale(rec, l, e / l.dim);
      rec[e] = scale_is_nan(bits) ? 0 : code(v[e], bf16_to_float(bits));
    }
  }
}

// int4 / int4h: per head, reject non-finite (and, rotating, out-of-range)
// heads, rotate, then one scale per group of 32; then pack two codes a byte.
template <bool kRotate>
__device__ void encode_int4(const DeviceLayout& l, float* v, uint8_t* rec, EncodeCounts& counts, int lane) {
  const int groups = l.groups_per_head;
  for (int h = 0; h < l.heads; ++h) {
    float* head = v + h * l.dim;
    const unsigned m = warp_amax_bits(v, h * l.dim, (h + 1) * l.dim, lane);
    const bool finite = m < kFloatInfBits;
    const bool in_range = !kRotate || __uint_as_float(m) < numeric::kInt4HMaxAbs;
    if (!finite || !in_range) {
      if (lane == 0) {
        counts.nonfinite_heads += !finite;
        counts.out_of_range_heads += finite && !in_range;
      }
      for (int g = lane; g < groups; g += 32) store_scale(rec, l, h * groups + g, kScaleNan);
      continue;
    }
    if constexpr (kRotate) {
      warp_fwht(head, l.dim, lane);
      for (int d = lane; d < l.dim; d += 32) head[d] = __fmul_rn(head[d], l.hadamard_norm);
      __syncwarp();
    }
    for (int g = 0; g < groups; ++g) {
      const int begin = g * kInt4GroupSize, end = min(l.dim, begin + kInt4GroupSize);
      const unsigned gm = warp_amax_bits(head, begin, end, lane);
      if (lane == 0) store_scale(rec, l, h * groups + g, scale_for(__uint_as_float(gm), 7.0f));
    }
  }
  __syncwarp();
  // A NaN scale marks a rejected head: its codes are 0, stored as nibble 8.
  auto nibble = [&](int e) -> uint32_t {
    const int h = e / l.dim, d = e - h * l.dim;
    const uint16_t bits = load_scale(rec, l, h * groups + d / kInt4GroupSize);
    return scale_is_nan(bits) ? 8u : quantize_nibble(v[e], bf16_to_float(bits));
  };
  if (l.vector_rows) {  // 8 codes of one group → 4 bytes
    for (int c = lane; c < l.elements / 8; c += 32) {
      const int e0 = 8 * c, h = e0 / l.dim, g = (e0 - h * l.dim) / kInt4GroupSize;
      const uint16_t bits = load_scale(rec, l, h * groups + g);
      uint32_t w = 0x88888888u;
      if (!scale_is_nan(bits)) {
        const float scale = bf16_to_float(bits);
        w = 0;
#pragma unroll
        for (int k = 0; k < 8; ++k) w |= static_cast<uint32_t>(quantize_nibble(v[e0 + k], scale)) << (4 * k);
      }
      reinterpret_cast<uint32_t*>(rec)[c] = w;
    }
  } else {
    for (int b = lane; b < l.payload_bytes; b += 32) {
      const uint32_t lo = nibble(2 * b), hi = 2 * b + 1 < l.elements ? nibble(2 * b + 1) : 0u;
      rec[b] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

// The generic encoder: any shape (byte-wise where the layout is not aligned),
// the row staged as floats in `v`. encode_row() picks it for the shapes the
// fast encoders do not serve.
template <CodecKind kCodec>
__device__ void encode_row_generic(const DeviceLayout& l, const uint16_t* row, std::byte* out, uint8_t* rec, float* v,
                                   EncodeCounts& counts, int lane) {
  if constexpr (kCodec == CodecKind::kBf16) {
    warp_copy(rec, row, 2 * l.elements, l.vector_rows, lane);
    __syncwarp();
    const auto* x = reinterpret_cast<const uint16_t*>(rec);
    for (int h = 0; h < l.heads; ++h) {  // count, never change, non-finite heads
      unsigned m = 0;
      for (int d = lane; d < l.dim; d += 32) m = max(m, static_cast<unsigned>(x[h * l.dim + d] & 0x7FFFu));
      m = warp_max(m);
      if (lane == 0) counts.nonfinite_heads += m >= 0x7F80u;
    }
  } else {
    load_row_as_float(l, row, v, lane);
    __syncwarp();
    if constexpr (kCodec == CodecKind::kInt8 || kCodec == CodecKind::kFp8) {
      encode_per_head<kCodec>(l, v, rec, counts, lane);
    } else {
      encode_int4<kCodec == CodecKind::kInt4H>(l, v, rec, counts, lane);
    }
  }
  zero_tail(rec, l, lane);
  __syncwarp();
  warp_copy(out, rec, l.record_bytes, l.vector_records, lane);
  __syncwarp();  // the work area is reused by the warp's next row
}

// ---- decode -------------------------------------------------------------------

__device__ inline uint16_t dequantize(float q, float scale) {
  return numeric::float_to_bf16_saturate(__fmul_rn(q, scale));
}

// numeric::float_to_bf16_saturate of two floats, packed (a low). The
// hardware conversion (round to nearest even, one instruction for both) agrees
// with it on every finite value that does not round past the largest BF16
// (tests/gpu_numeric_test.cc); NaN, ±Inf and saturation take the reference's
// integer code.
__device__ inline uint32_t pack_bf16_saturate(float a, float b) {
  if ((magnitude_bits(a) < 0x7F7F8000u) & (magnitude_bits(b) < 0x7F7F8000u)) {
    const __nv_bfloat162 h = __float22bfloat162_rn(make_float2(a, b));
    return static_cast<uint32_t>(__bfloat16_as_ushort(h.x)) | (static_cast<uint32_t>(__bfloat16_as_ushort(h.y)) << 16);
  }
  return numeric::float_to_bf16_saturate(a) | (static_cast<uint32_t>(numeric::float_to_bf16_saturate(b)) << 16);
}

// Two E4M3 codes (a in the low byte) as floats, by the hardware conversion
// (equal to numeric::e4m3_to_float for every code; NaN codes give a NaN).
__device__ inline float2 e4m3x2_to_float2(uint32_t codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes), __NV_E4M3);
  return __half22float2(__half2(h));
}

template <CodecKind kCodec>
__device__ float code_value(const uint8_t* payload, int e) {
  if constexpr (kCodec == CodecKind::kInt8) return static_cast<float>(static_cast<int8_t>(payload[e]));
  if constexpr (kCodec == CodecKind::kFp8) return numeric::e4m3_to_float(payload[e]);
  return static_cast<float>(static_cast<int>((payload[e >> 1] >> ((e & 1) * 4)) & 0xF) - 8);  // int4, int4h
}

template <CodecKind kCodec>
__device__ int scale_index(const DeviceLayout& l, int e) {
  const int h = e / l.dim;
  if constexpr (kCodec == CodecKind::kInt8 || kCodec == CodecKind::kFp8) return h;
  return h * l.groups_per_head + (e - h * l.dim) / kInt4GroupSize;
}

// ---- the fast encoders (vector rows) ------------------------------------------
//
// One pass over the row: each lane loads 16-byte chunks (8 elements) into the
// warp's work area and takes their largest magnitude on packed BF16 bits; the
// lanes of a scale group combine theirs with shuffles (or shared atomics).
// Then one lane per group computes its scale and the scale's reciprocal, and
// the lanes quantise chunk by chunk with exact quotients (quotient()).

// fl(x / s), the correctly rounded IEEE quotient, from r = RN(1/s): a product
// and two residual corrections (exact with FMA). The first correction makes
// the quotient faithful, the second correctly rounded (Markstein's theorem).
// Valid while x/s and the residuals stay normal: codes come from |x/s| ≤ 448.
// A quotient in the subnormal range can be off by an ulp, but every codec
// turns such a value into code 0 whichever ulp it is. copysign keeps −0
// for x = −0, as the division does (fp8 code 0x80; the integer codecs map
// both zeros to code 0 and skip it).
template <bool kSignedZero = false>
__device__ inline float quotient(float x, float s, float r) {
  float q = __fmul_rn(x, r);
  float e = __fmaf_rn(-q, s, x);
  q = __fmaf_rn(e, r, q);
  e = __fmaf_rn(-q, s, x);
  q = __fmaf_rn(e, r, q);
  return kSignedZero ? copysignf(q, x) : q;
}

// Largest BF16 magnitude bits of 8 packed elements.
__device__ inline unsigned chunk_magnitude(const uint4& c) {
  constexpr unsigned kMask = 0x7FFF7FFFu;
  const unsigned m = __vmaxu2(__vmaxu2(c.x & kMask, c.y & kMask), __vmaxu2(c.z & kMask, c.w & kMask));
  return max(m & 0xFFFFu, m >> 16);
}

__device__ inline float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ inline float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }

template <CodecKind kCodec>
__device__ inline int group_of(const DeviceLayout& l, int e) {
  const int h = e / l.dim;
  if constexpr (kCodec == CodecKind::kInt8 || kCodec == CodecKind::kFp8) return h;
  return h * l.groups_per_head + (e - h * l.dim) / kInt4GroupSize;
}

// int8 and int4 codes: rint(x/s) clamped; __float2int_rn rounds half to even
// like rint, and |x/s| ≤ 128 converts exactly. int4 is stored as q + 8.
template <CodecKind kCodec>
__device__ inline uint32_t code_of(float x, float scale, float reciprocal) {
  const int q = __float2int_rn(quotient(x, scale, reciprocal));
  if constexpr (kCodec == CodecKind::kInt8) return static_cast<uint8_t>(static_cast<int8_t>(min(max(q, -127), 127)));
  return static_cast<uint32_t>(min(max(q, -7), 7) + 8);
}

// Two fp8 codes (a low) by the hardware's saturating conversion, equal to
// numeric::float_to_e4m3 on finite input (tests/gpu_numeric_test.cc); the
// quotients of a finite head are finite.
__device__ inline uint32_t fp8_codes(float a, float b, float scale, float reciprocal) {
  const float2 q = make_float2(quotient<true>(a, scale, reciprocal), quotient<true>(b, scale, reciprocal));
  return __nv_cvt_float2_to_fp8x2(q, __NV_SATFINITE, __NV_E4M3);
}

// int8, fp8 and int4 on vector rows. `work`: the row as BF16, then group
// maxima, scales and reciprocals (warp_scratch_bytes).
template <CodecKind kCodec>
__device__ void encode_fast(const DeviceLayout& l, const uint16_t* row, uint8_t* rec, uint8_t* work,
                            EncodeCounts& counts, int lane) {
  constexpr bool kPerHead = kCodec == CodecKind::kInt8 || kCodec == CodecKind::kFp8;
  constexpr float kQmax = kCodec == CodecKind::kInt8 ? 127.0f : kCodec == CodecKind::kFp8 ? 448.0f : 7.0f;
  const int chunks = l.elements / 8, scales = l.num_scales, lpg = l.lanes_per_group;
  auto* x = reinterpret_cast<uint4*>(work);
  auto* gmax = reinterpret_cast<unsigned*>(work + round16(static_cast<size_t>(l.elements) * 2));
  float* sf = reinterpret_cast<float*>(gmax + scales);
  float* rf = sf + scales;
  const bool shuffle = lpg > 0 && lpg <= 32 && (lpg & (lpg - 1)) == 0;
  if (!shuffle) {
    for (int g = lane; g < scales; g += 32) gmax[g] = 0;
    __syncwarp();
  }
  const auto* in = reinterpret_cast<const uint4*>(row);
  for (int base = 0; base < chunks; base += 4 * 32) {
    uint4 r[4] = {};
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (const int c = base + k * 32 + lane; c < chunks) r[k] = in[c];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int c = base + k * 32 + lane;
      unsigned m = c < chunks ? chunk_magnitude(r[k]) : 0u;
      if (c < chunks) x[c] = r[k];
      if (shuffle) {  // a group's chunks are on lanes [j·lpg, (j+1)·lpg) of this step
        for (int offset = lpg / 2; offset > 0; offset >>= 1) m = max(m, __shfl_xor_sync(kFullMask, m, offset));
        if (c < chunks && lane % lpg == 0) gmax[c / lpg] = m;
      } else if (c < chunks) {
        atomicMax(&gmax[group_of<kCodec>(l, 8 * c)], m);
      }
    }
  }
  __syncwarp();
  for (int g = lane; g < scales; g += 32) {
    // A head with a non-finite element is rejected whole: NaN scales, code 0.
    bool finite = gmax[g] < 0x7F80u;
    if constexpr (!kPerHead) {
      const int first = g - g % l.groups_per_head;
      for (int k = first; k < first + l.groups_per_head; ++k) finite &= gmax[k] < 0x7F80u;
      counts.nonfinite_heads += !finite && g == first;
    } else {
      counts.nonfinite_heads += !finite;
    }
    const uint16_t bits = finite ? scale_for(bf16_to_float(static_cast<uint16_t>(gmax[g])), kQmax) : kScaleNan;
    store_scale(rec, l, g, bits);
    sf[g] = bf16_to_float(bits);
    rf[g] = finite ? __frcp_rn(sf[g]) : 0.0f;
  }
  __syncwarp();
  for (int c = lane; c < chunks; c += 32) {
    const uint4 w = x[c];
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
    const int g = group_of<kCodec>(l, 8 * c);
    const float scale = sf[g], reciprocal = rf[g];
    const bool rejected = isnan(scale);
    if constexpr (kPerHead) {
      uint32_t out[2] = {0, 0};
      if (!rejected) {
#pragma unroll
        for (int k = 0; k < 8; k += 2) {
          const float a = bf16_lo(words[k / 2]), b = bf16_hi(words[k / 2]);
          const uint32_t pair = kCodec == CodecKind::kFp8 ? fp8_codes(a, b, scale, reciprocal)
                                                          : code_of<kCodec>(a, scale, reciprocal) |
                                                                (code_of<kCodec>(b, scale, reciprocal) << 8);
          out[k / 4] |= pair << (8 * (k % 4));
        }
      }
      reinterpret_cast<uint2*>(rec)[c] = make_uint2(out[0], out[1]);
    } else {
      uint32_t out = 0x88888888u;  // a rejected head: code 0, stored 8
      if (!rejected) {
        out = 0;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const float v = k % 2 ? bf16_hi(words[k / 2]) : bf16_lo(words[k / 2]);
          out |= code_of<kCodec>(v, scale, reciprocal) << (4 * k);
        }
      }
      reinterpret_cast<uint32_t*>(rec)[c] = out;
    }
  }
}

// The Walsh–Hadamard butterflies of one head held E elements a lane (element
// lane·E + i in v[i]): spans 1 … E/2 in registers, then spans E … 16·E across
// lanes — the reference's order (codec/hadamard.h). Without the normalisation.
template <int E>
__device__ inline void fwht_registers(float (&v)[E], int lane) {
#pragma unroll
  for (int span = 1; span < E; span <<= 1) {
#pragma unroll
    for (int i = 0; i < E; ++i) {
      if (i & span) continue;
      const float a = v[i], b = v[i + span];
      v[i] = __fadd_rn(a, b);
      v[i + span] = __fsub_rn(a, b);
    }
  }
#pragma unroll
  for (int lanes = 1; lanes < 32; lanes <<= 1) {
    const bool upper = lane & lanes;  // this lane holds the butterflies' second elements
#pragma unroll
    for (int i = 0; i < E; ++i) {
      const float other = __shfl_xor_sync(kFullMask, v[i], lanes);
      v[i] = upper ? __fsub_rn(other, v[i]) : __fadd_rn(v[i], other);
    }
  }
}

// Stores E nibbles (E/2 bytes) at byte `offset` of a record in shared memory.
template <int E>
__device__ inline void store_nibbles(uint8_t* rec, int offset, uint32_t packed) {
  if constexpr (E == 2) rec[offset] = static_cast<uint8_t>(packed);
  if constexpr (E == 4) *reinterpret_cast<uint16_t*>(rec + offset) = static_cast<uint16_t>(packed);
  if constexpr (E == 8) *reinterpret_cast<uint32_t*>(rec + offset) = packed;
}
template <int E>
__device__ inline uint32_t load_nibbles(const uint8_t* rec, int offset) {
  if constexpr (E == 2) return rec[offset];
  if constexpr (E == 4) return *reinterpret_cast<const uint16_t*>(rec + offset);
  if constexpr (E == 8) return *reinterpret_cast<const uint32_t*>(rec + offset);
  return 0;
}

// int4h with head_dim = 32·E: each head rotated in registers; a group of 32
// is the E elements of 32/E adjacent lanes. `work`: the row as BF16.
template <int E>
__device__ void encode_int4h_registers(const DeviceLayout& l, const uint16_t* row, uint8_t* rec, uint8_t* work,
                                       EncodeCounts& counts, int lane) {
  constexpr int kLanesPerGroup = 32 / E;
  auto* x = reinterpret_cast<uint16_t*>(work);
  warp_copy(x, row, 2 * l.elements, true, lane);
  __syncwarp();
  for (int h = 0; h < l.heads; ++h) {
    const int first = h * l.dim + lane * E;
    float v[E];
    unsigned m = 0;
#pragma unroll
    for (int i = 0; i < E; ++i) {
      v[i] = bf16_to_float(x[first + i]);
      m = max(m, static_cast<unsigned>(x[first + i] & 0x7FFFu));
    }
    m = warp_max(m);
    const bool finite = m < 0x7F80u;
    const bool in_range = bf16_to_float(static_cast<uint16_t>(m)) < numeric::kInt4HMaxAbs;
    if (!finite || !in_range) {
      if (lane == 0) {
        counts.nonfinite_heads += !finite;
        counts.out_of_range_heads += finite && !in_range;
      }
      if (lane % kLanesPerGroup == 0) store_scale(rec, l, h * l.groups_per_head + lane / kLanesPerGroup, kScaleNan);
      store_nibbles<E>(rec, first / 2, 0x88888888u);
      continue;
    }
    fwht_registers<E>(v, lane);
    unsigned gm = 0;
#pragma unroll
    for (int i = 0; i < E; ++i) {
      v[i] = __fmul_rn(v[i], l.hadamard_norm);
      gm = max(gm, magnitude_bits(v[i]));
    }
    for (int offset = kLanesPerGroup / 2; offset > 0; offset >>= 1)
      gm = max(gm, __shfl_xor_sync(kFullMask, gm, offset));
    const uint16_t bits = scale_for(__uint_as_float(gm), 7.0f);
    if (lane % kLanesPerGroup == 0) store_scale(rec, l, h * l.groups_per_head + lane / kLanesPerGroup, bits);
    const float scale = bf16_to_float(bits), reciprocal = __frcp_rn(scale);
    uint32_t packed = 0;
#pragma unroll
    for (int i = 0; i < E; ++i) packed |= code_of<CodecKind::kInt4H>(v[i], scale, reciprocal) << (4 * i);
    store_nibbles<E>(rec, first / 2, packed);
  }
}

template <int E>
__device__ void decode_int4h_registers(const DeviceLayout& l, const uint8_t* rec, uint16_t* row, int lane) {
  constexpr int kLanesPerGroup = 32 / E;
  for (int h = 0; h < l.heads; ++h) {
    const int first = h * l.dim + lane * E;
    const float scale = bf16_to_float(load_scale(rec, l, h * l.groups_per_head + lane / kLanesPerGroup));
    const uint32_t packed = load_nibbles<E>(rec, first / 2);
    float v[E];
#pragma unroll
    for (int i = 0; i < E; ++i)
      v[i] = __fmul_rn(static_cast<float>(static_cast<int>((packed >> (4 * i)) & 0xFu) - 8), scale);
    fwht_registers<E>(v, lane);
    uint32_t w[E / 2];
#pragma unroll
    for (int i = 0; i < E / 2; ++i)
      w[i] = pack_bf16_saturate(__fmul_rn(v[2 * i], l.hadamard_norm), __fmul_rn(v[2 * i + 1], l.hadamard_norm));
    if constexpr (E == 2) *reinterpret_cast<uint32_t*>(row + first) = w[0];
    if constexpr (E == 4) *reinterpret_cast<uint2*>(row + first) = make_uint2(w[0], w[1]);
    if constexpr (E == 8) *reinterpret_cast<uint4*>(row + first) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// ---- 32 elements a lane (head_dim = 32·k, k a power of two ≤ 32) -------------
//
// Lane j of a pass owns unit u = 32·pass + j: elements [32u, 32u + 32) of the
// row, one int4 group (scale u), part of head u / k. A head's k lanes combine
// maxima with xor shuffles; the row goes through shared memory only on decode,
// to make its stores coalesced. int8, fp8 and int4 (int4h rotates a head at a
// time, above: 32 floats a lane would cost it half its warps).

// Largest of `v` over the lanes_per_head lanes of a head (all lanes call it).
__device__ inline unsigned head_max(unsigned v, int lanes_per_head) {
  for (int offset = lanes_per_head / 2; offset > 0; offset >>= 1) v = max(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

template <CodecKind kCodec>
__device__ void encode_lanes(const DeviceLayout& l, const uint16_t* row, uint8_t* rec, EncodeCounts& counts,
                             int lane) {
  static_assert(kCodec == CodecKind::kInt8 || kCodec == CodecKind::kFp8 || kCodec == CodecKind::kInt4);
  constexpr bool kPerHead = kCodec != CodecKind::kInt4;
  constexpr float kQmax = kCodec == CodecKind::kInt8 ? 127.0f : kCodec == CodecKind::kFp8 ? 448.0f : 7.0f;
  const int k = l.lanes_per_head, units = l.elements / 32;
  for (int pass = 0; pass < units; pass += 32) {
    const int u = pass + lane;
    const bool active = u < units;  // units % k == 0: a head's lanes are all active or all idle
    uint32_t w[16] = {};
    if (active) {
      const auto* in = reinterpret_cast<const uint4*>(row) + 4 * u;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint4 c = in[q];
        w[4 * q] = c.x, w[4 * q + 1] = c.y, w[4 * q + 2] = c.z, w[4 * q + 3] = c.w;
      }
    }
    unsigned m = 0;
#pragma unroll
    for (int q = 0; q < 16; ++q) m = max(m, __vmaxu2(m, w[q] & 0x7FFF7FFFu));
    m = max(m & 0xFFFFu, m >> 16);
    const unsigned hm = head_max(m, k);
    const bool finite = hm < 0x7F80u;
    const bool first_of_head = u % k == 0;
    if constexpr (kPerHead) {
      const uint16_t bits = finite ? scale_for(bf16_to_float(static_cast<uint16_t>(hm)), kQmax) : kScaleNan;
      if (!active) continue;
      if (first_of_head) {
        store_scale(rec, l, u / k, bits);
        counts.nonfinite_heads += !finite;
      }
      uint32_t out[8] = {};
      if (finite) {
        const float scale = bf16_to_float(bits), reciprocal = __frcp_rn(scale);
#pragma unroll
        for (int q = 0; q < 16; ++q) {
          const float a = bf16_lo(w[q]), b = bf16_hi(w[q]);
          const uint32_t pair = kCodec == CodecKind::kFp8 ? fp8_codes(a, b, scale, reciprocal)
                                                          : code_of<kCodec>(a, scale, reciprocal) |
                                                                (code_of<kCodec>(b, scale, reciprocal) << 8);
          out[q / 2] |= pair << (16 * (q % 2));
        }
      }
      auto* dst = reinterpret_cast<uint4*>(rec + 32 * u);
      dst[0] = make_uint4(out[0], out[1], out[2], out[3]);
      dst[1] = make_uint4(out[4], out[5], out[6], out[7]);
    } else {  // int4: the lane's 32 elements are one group
      uint4 codes = make_uint4(0x88888888u, 0x88888888u, 0x88888888u, 0x88888888u);  // a rejected head
      uint16_t bits = kScaleNan;
      if (finite) {
        bits = scale_for(bf16_to_float(static_cast<uint16_t>(m)), 7.0f);
        const float scale = bf16_to_float(bits), reciprocal = __frcp_rn(scale);
        uint32_t out[4] = {};
#pragma unroll
        for (int q = 0; q < 16; ++q) {
          out[q / 4] |= code_of<kCodec>(bf16_lo(w[q]), scale, reciprocal) << (8 * (q % 4));
          out[q / 4] |= code_of<kCodec>(bf16_hi(w[q]), scale, reciprocal) << (8 * (q % 4) + 4);
        }
        codes = make_uint4(out[0], out[1], out[2], out[3]);
      }
      if (!active) continue;
      if (first_of_head) counts.nonfinite_heads += !finite;
      store_scale(rec, l, u, bits);
      reinterpret_cast<uint4*>(rec)[u] = codes;
    }
  }
}

// Decodes into `staged` (the row, 64 bytes a unit at a stride of
// kLaneRowStride) and then copies it to `row` with coalesced 16-byte stores:
// storing each lane's 64 bytes straight to global memory would leave every
// store instruction half its sectors.
template <CodecKind kCodec>
__device__ void decode_lanes(const DeviceLayout& l, const uint8_t* rec, uint8_t* staged, uint16_t* row, int lane) {
  static_assert(kCodec == CodecKind::kInt8 || kCodec == CodecKind::kFp8 || kCodec == CodecKind::kInt4);
  constexpr bool kPerHead = kCodec != CodecKind::kInt4;
  const int k = l.lanes_per_head, units = l.elements / 32;
  for (int pass = 0; pass < units; pass += 32) {
    const int u = pass + lane;
    if (u >= units) break;
    const float scale = bf16_to_float(load_scale(rec, l, kPerHead ? u / k : u));
    float v[32];
    if constexpr (kPerHead) {
      const auto* src = reinterpret_cast<const uint4*>(rec + 32 * u);
      const uint4 c0 = src[0], c1 = src[1];
      const uint32_t words[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        if constexpr (kCodec == CodecKind::kFp8) {
          const float2 lo = e4m3x2_to_float2(words[q] & 0xFFFFu), hi = e4m3x2_to_float2(words[q] >> 16);
          v[4 * q] = lo.x, v[4 * q + 1] = lo.y, v[4 * q + 2] = hi.x, v[4 * q + 3] = hi.y;
        } else {
#pragma unroll
          for (int b = 0; b < 4; ++b) v[4 * q + b] = static_cast<float>(static_cast<int8_t>(words[q] >> (8 * b)));
        }
      }
    } else {
      const uint4 c = reinterpret_cast<const uint4*>(rec)[u];
      const uint32_t words[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
      for (int i = 0; i < 32; ++i)
        v[i] = static_cast<float>(static_cast<int>((words[i / 8] >> (4 * (i % 8))) & 0xFu) - 8);
    }
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = __fmul_rn(v[i], scale);
    auto* dst = reinterpret_cast<uint4*>(staged + kLaneRowStride * static_cast<size_t>(u));
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint32_t out[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = 8 * q + 2 * j;
        out[j] = pack_bf16_saturate(v[i], v[i + 1]);
      }
      dst[q] = make_uint4(out[0], out[1], out[2], out[3]);
    }
  }
  __syncwarp();
  auto* out = reinterpret_cast<uint4*>(row);
  for (int j = lane; j < l.elements / 8; j += 32)
    out[j] = *reinterpret_cast<const uint4*>(staged + kLaneRowStride * static_cast<size_t>(j / 4) + 16 * (j % 4));
}

// The generic decoder (any shape; int4h rotated in shared memory, `v`).
template <CodecKind kCodec>
__device__ void decode_row_generic(const DeviceLayout& l, const std::byte* in, uint16_t* row, uint8_t* rec, float* v,
                                   int lane) {
  if constexpr (kCodec == CodecKind::kBf16) {
    warp_copy(row, in, 2 * l.elements, l.vector_rows && l.vector_records, lane);
    return;
  }
  warp_copy(rec, in, l.record_bytes, l.vector_records, lane);
  __syncwarp();
  constexpr bool kRotate = kCodec == CodecKind::kInt4H;
  if (l.vector_rows) {  // 8 elements of one head (and one group) → 16 bytes
    for (int c = lane; c < l.elements / 8; c += 32) {
      const int e0 = 8 * c;
      const float scale = bf16_to_float(load_scale(rec, l, scale_index<kCodec>(l, e0)));
      float x[8];
      if constexpr (kCodec == CodecKind::kFp8) {
        const uint2 codes = reinterpret_cast<const uint2*>(rec)[c];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float2 f = e4m3x2_to_float2(((k < 2 ? codes.x : codes.y) >> (16 * (k % 2))) & 0xFFFFu);
          x[2 * k] = __fmul_rn(f.x, scale);
          x[2 * k + 1] = __fmul_rn(f.y, scale);
        }
      } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) x[k] = __fmul_rn(code_value<kCodec>(rec, e0 + k), scale);
      }
      if constexpr (kRotate) {
        reinterpret_cast<float4*>(v)[2 * c] = make_float4(x[0], x[1], x[2], x[3]);
        reinterpret_cast<float4*>(v)[2 * c + 1] = make_float4(x[4], x[5], x[6], x[7]);
      } else {
        uint32_t w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) w[k] = pack_bf16_saturate(x[2 * k], x[2 * k + 1]);
        reinterpret_cast<uint4*>(row)[c] = make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
  } else {
    for (int e = lane; e < l.elements; e += 32) {
      const float scale = bf16_to_float(load_scale(rec, l, scale_index<kCodec>(l, e)));
      if constexpr (kRotate) {
        v[e] = __fmul_rn(code_value<kCodec>(rec, e), scale);
      } else {
        row[e] = dequantize(code_value<kCodec>(rec, e), scale);
      }
    }
  }
  if constexpr (kRotate) {
    __syncwarp();
    for (int h = 0; h < l.heads; ++h) warp_fwht(v + h * l.dim, l.dim, lane);
    if (l.vector_rows) {
      for (int c = lane; c < l.elements / 8; c += 32) {
        uint32_t w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k)
          w[k] = pack_bf16_saturate(__fmul_rn(v[8 * c + 2 * k], l.hadamard_norm),
                                    __fmul_rn(v[8 * c + 2 * k + 1], l.hadamard_norm));
        reinterpret_cast<uint4*>(row)[c] = make_uint4(w[0], w[1], w[2], w[3]);
      }
    } else {
      for (int e = lane; e < l.elements; e += 32) row[e] = dequantize(v[e], l.hadamard_norm);
    }
  }
  __syncwarp();  // the work area is reused by the warp's next row
}

// Encodes `row` into the record at `out`. `rec` and `work` are the warp's
// area (warp_scratch_bytes(l, true)).
template <CodecKind kCodec>
__device__ void encode_row(const DeviceLayout& l, const uint16_t* row, std::byte* out, uint8_t* rec, uint8_t* work,
                           EncodeCounts& counts, int lane) {
  if constexpr (kCodec == CodecKind::kBf16) {
    encode_row_generic<kCodec>(l, row, out, rec, reinterpret_cast<float*>(work), counts, lane);
  } else {
    const RowPath path = row_path(l);
    if (path == RowPath::kGeneric) {
      encode_row_generic<kCodec>(l, row, out, rec, reinterpret_cast<float*>(work), counts, lane);
      return;
    }
    if constexpr (kCodec == CodecKind::kInt4H) {
      switch (l.fwht_per_lane) {  // path kRotate
        case 2: encode_int4h_registers<2>(l, row, rec, work, counts, lane); break;
        case 4: encode_int4h_registers<4>(l, row, rec, work, counts, lane); break;
        default: encode_int4h_registers<8>(l, row, rec, work, counts, lane); break;
      }
    } else if (path == RowPath::kLanes) {
      encode_lanes<kCodec>(l, row, rec, counts, lane);
    } else {
      encode_fast<kCodec>(l, row, rec, work, counts, lane);
    }
    zero_tail(rec, l, lane);
    __syncwarp();
    warp_copy(out, rec, l.record_bytes, l.vector_records, lane);
    __syncwarp();
  }
}

// Decodes the record at `in` into `row`; `rec` and `work` as for encode_row.
template <CodecKind kCodec>
__device__ void decode_row(const DeviceLayout& l, const std::byte* in, uint16_t* row, uint8_t* rec, uint8_t* work,
                           int lane) {
  if constexpr (kCodec == CodecKind::kInt4H) {
    if (row_path(l) == RowPath::kRotate) {
      warp_copy(rec, in, l.record_bytes, l.vector_records, lane);
      __syncwarp();
      switch (l.fwht_per_lane) {
        case 2: decode_int4h_registers<2>(l, rec, row, lane); break;
        case 4: decode_int4h_registers<4>(l, rec, row, lane); break;
        default: decode_int4h_registers<8>(l, rec, row, lane); break;
      }
      __syncwarp();
      return;
    }
  } else if constexpr (kCodec != CodecKind::kBf16) {
    if (row_path(l) == RowPath::kLanes) {
      warp_copy(rec, in, l.record_bytes, l.vector_records, lane);
      __syncwarp();
      decode_lanes<kCodec>(l, rec, work, row, lane);
      __syncwarp();
      return;
    }
  }
  decode_row_generic<kCodec>(l, in, row, rec, reinterpret_cast<float*>(work), lane);
}

}  // namespace device
}  // namespace hiq::cuda
