// codec/cuda/row_common.cuh — what the four row paths of the GPU codec share:
// the DeviceLayout kernels take by value, the choice of path (row_path) and
// the shared memory each needs, and the warp helpers every path uses (scales,
// copies, the exact quotients and conversions). The paths themselves:
//   row_generic.cuh   any shape, element by element (kGeneric)
//   row_vector.cuh    16-byte chunks through shared memory (kVector)
//   row_lanes.cuh     32 elements a lane, in registers (kLanes)
//   row_rotate.cuh    int4h, a head rotated in registers (kRotate)
// and codec/cuda/row_codec.cuh dispatches a row to one of them.
//
// The arithmetic is the scalar reference's (src/codec/scalar.cc) operation for
// operation: the same conversions (codec/numeric.h, compiled for the device),
// IEEE division and rint, explicit round-to-nearest adds and multiplies, and
// the files are built with -fmad=false so nothing is contracted into an FMA.
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

struct EncodeCounts {
  unsigned nonfinite_heads = 0, out_of_range_heads = 0;  // kept by lane 0
};

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

// ---- exact quotients and codes (the vector, lanes and rotate paths) -----------

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

__device__ inline float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ inline float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }

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

}  // namespace device
}  // namespace hiq::cuda
