// codec/cuda/row_rotate.cuh — the rotate row path (RowPath::kRotate): int4h
// with head_dim 64, 128 or 256, a head's elements held E = head_dim / 32 a
// lane and rotated in registers with shuffles, encode and decode.
#pragma once

#include "codec/cuda/row_common.cuh"

namespace hiq::cuda::device {

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

}  // namespace hiq::cuda::device
