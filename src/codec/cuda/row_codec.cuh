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
};

// Shared memory one warp needs for `layout`: a multiple of 16, so every warp's
// area starts 16-byte aligned.
inline size_t warp_scratch_bytes(const DeviceLayout& l) {
  const size_t rec = (static_cast<size_t>(l.record_bytes) + 15) / 16 * 16;
  const size_t row = l.codec == CodecKind::kBf16 ? 0 : static_cast<size_t>(l.elements) * 4;
  return rec + (row + 15) / 16 * 16;
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

// Encodes `row` into the record at `out`. `rec` and `v` are the warp's work area.
template <CodecKind kCodec>
__device__ void encode_row(const DeviceLayout& l, const uint16_t* row, std::byte* out, uint8_t* rec, float* v,
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

// Decodes the record at `in` into `row`.
template <CodecKind kCodec>
__device__ void decode_row(const DeviceLayout& l, const std::byte* in, uint16_t* row, uint8_t* rec, float* v,
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
#pragma unroll
      for (int k = 0; k < 8; ++k) x[k] = __fmul_rn(code_value<kCodec>(rec, e0 + k), scale);
      if constexpr (kRotate) {
        reinterpret_cast<float4*>(v)[2 * c] = make_float4(x[0], x[1], x[2], x[3]);
        reinterpret_cast<float4*>(v)[2 * c + 1] = make_float4(x[4], x[5], x[6], x[7]);
      } else {
        uint32_t w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k)
          w[k] = numeric::float_to_bf16_saturate(x[2 * k]) |
                 (static_cast<uint32_t>(numeric::float_to_bf16_saturate(x[2 * k + 1])) << 16);
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
          w[k] = dequantize(v[8 * c + 2 * k], l.hadamard_norm) |
                 (static_cast<uint32_t>(dequantize(v[8 * c + 2 * k + 1], l.hadamard_norm)) << 16);
        reinterpret_cast<uint4*>(row)[c] = make_uint4(w[0], w[1], w[2], w[3]);
      }
    } else {
      for (int e = lane; e < l.elements; e += 32) row[e] = dequantize(v[e], l.hadamard_norm);
    }
  }
  __syncwarp();  // the work area is reused by the warp's next row
}

}  // namespace device
}  // namespace hiq::cuda
