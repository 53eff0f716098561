// codec/cuda/row_lanes.cuh — the lanes row path (RowPath::kLanes): int8, fp8
// and int4 with head_dim = 32·k (k a power of two ≤ 32), 32 elements a lane
// in registers, encode and decode.
#pragma once

#include "codec/cuda/row_common.cuh"

namespace hiq::cuda::device {

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

}  // namespace hiq::cuda::device
