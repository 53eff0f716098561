// codec/cuda/row_vector.cuh — the vector row path (RowPath::kVector): int8,
// fp8 and int4 encoding of rows whose head_dim is a multiple of 8, in 16-byte
// chunks through the warp's shared memory. (Such records decode on the
// generic path.)
#pragma once

#include "codec/cuda/row_common.cuh"

namespace hiq::cuda::device {

// ---- the fast encoders (vector rows) ------------------------------------------
//
// One pass over the row: each lane loads 16-byte chunks (8 elements) into the
// warp's work area and takes their largest magnitude on packed BF16 bits; the
// lanes of a scale group combine theirs with shuffles (or shared atomics).
// Then one lane per group computes its scale and the scale's reciprocal, and
// the lanes quantise chunk by chunk with exact quotients (quotient()).

// Largest BF16 magnitude bits of 8 packed elements.
__device__ inline unsigned chunk_magnitude(const uint4& c) {
  constexpr unsigned kMask = 0x7FFF7FFFu;
  const unsigned m = __vmaxu2(__vmaxu2(c.x & kMask, c.y & kMask), __vmaxu2(c.z & kMask, c.w & kMask));
  return max(m & 0xFFFFu, m >> 16);
}

template <CodecKind kCodec>
__device__ inline int group_of(const DeviceLayout& l, int e) {
  const int h = e / l.dim;
  if constexpr (kCodec == CodecKind::kInt8 || kCodec == CodecKind::kFp8) return h;
  return h * l.groups_per_head + (e - h * l.dim) / kInt4GroupSize;
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

}  // namespace hiq::cuda::device
