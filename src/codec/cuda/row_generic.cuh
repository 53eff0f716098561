// codec/cuda/row_generic.cuh — the generic row path (RowPath::kGeneric): any
// shape and alignment, element by element, the row staged as floats in the
// warp's shared memory (int4h rotated there). The bf16 codec always takes it,
// and every shape the faster paths do not serve (row_common.cuh).
#pragma once

#include "codec/cuda/row_common.cuh"

namespace hiq::cuda::device {

__device__ inline bool scale_is_nan(uint16_t bits) { return (bits & 0x7FFFu) > 0x7F80u; }

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

}  // namespace hiq::cuda::device
