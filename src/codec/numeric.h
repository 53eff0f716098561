// codec/numeric.h — scalar number formats shared by every codec implementation:
// BF16 and FP8 E4M3 conversions with round-to-nearest-even, written with integer
// operations so their results are defined bit for bit (and match the GPU's
// __float2bfloat16_rn and __nv_cvt_float_to_fp8(…, __NV_SATFINITE, __NV_E4M3)).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

// The conversions are also compiled for the GPU (HIQ_HOST_DEVICE), so the CUDA
// codec kernels round with exactly this code.
#if defined(__CUDACC__)
#define HIQ_HOST_DEVICE __host__ __device__
#else
#define HIQ_HOST_DEVICE
#endif

namespace hiq::numeric {

inline constexpr uint16_t kBf16QuietNan = 0x7FC0;
inline constexpr float kMinAmax = 0x1p-112f;       // floor of a scale's amax: keeps scales normal
inline constexpr float kInt4HMaxAbs = 0x1p64f;     // int4h rotates heads below this magnitude only

HIQ_HOST_DEVICE inline float bf16_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// IEEE half to float, exactly (subnormals, ±Inf and NaN included).
HIQ_HOST_DEVICE inline float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
  if (exponent == 0) {  // ±0 or subnormal: mantissa · 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

HIQ_HOST_DEVICE inline bool bf16_is_finite(uint16_t h) { return (h & 0x7F80u) != 0x7F80u; }

// Round to nearest, ties to even; NaN stays NaN (made quiet); overflow gives ±Inf.
HIQ_HOST_DEVICE inline uint16_t float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// The rounding of every decoder: float_to_bf16, except that a finite value that
// rounds past the largest BF16 becomes ±0x7F7F instead of ±Inf, and every NaN
// becomes the canonical 0x7FC0. (A scale that BF16 rounded up can make q·scale
// exceed the largest BF16 by up to 2^-8 of it, and a finite input must never
// come back infinite. Which NaN payload survives a float operation depends on
// operand order, which compilers may swap: canonical NaNs keep decoders
// bit-identical everywhere, the GPU included.)
HIQ_HOST_DEVICE inline uint16_t float_to_bf16_saturate(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t magnitude = u & 0x7FFFFFFFu;
  if (magnitude >= 0x7F7F8000u) [[unlikely]] {  // NaN, ±Inf, or a finite value that rounds to ±Inf
    if (magnitude > 0x7F800000u) return kBf16QuietNan;
    if (magnitude == 0x7F800000u) return static_cast<uint16_t>(u >> 16);
    return static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7F7Fu);
  }
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// FP8 E4M3 ("fn" variant: no infinities, 0x7F/0xFF are NaN, max finite 448).
// Round to nearest even; magnitudes ≥ 448 and ±Inf saturate to ±448; NaN → 0x7F.
HIQ_HOST_DEVICE inline uint8_t float_to_e4m3(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7Fu);
  if (a >= 0x43E00000u) return static_cast<uint8_t>(sign | 0x7Eu);  // ≥ 448
  if (a < 0x3C800000u) {  // below 2^-6: subnormal E4M3, a multiple of 2^-9
#if defined(__CUDA_ARCH__)
    const float q = rintf(std::bit_cast<float>(a) * 512.0f);  // 0..8; 8 is 2^-6 (0x08)
#else
    const float q = std::nearbyint(std::bit_cast<float>(a) * 512.0f);
#endif
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(q));
  }
  const uint32_t rounded = a + 0x7FFFFu + ((a >> 20) & 1u);  // keep 3 mantissa bits
  return static_cast<uint8_t>(sign | ((rounded >> 20) - (120u << 3)));  // rebias 127 → 7
}

HIQ_HOST_DEVICE inline float e4m3_to_float(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80) << 24;
  const uint32_t exponent = (b >> 3) & 0xFu, mantissa = b & 7u;
  if (exponent == 0xF && mantissa == 7) return std::bit_cast<float>(0x7FC00000u);  // NaN, canonical
  if (exponent == 0) {  // subnormal: mantissa · 2^-9, exact
    const float magnitude = static_cast<float>(mantissa) * 0x1p-9f;
    return b & 0x80 ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 120u) << 23) | (mantissa << 20));  // rebias 7 → 127
}

// The int4h normalisation 1/sqrt(n), computed in double and rounded once to float
// (exact for n a power of 4).
inline float hadamard_norm(int n) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(n))); }

}  // namespace hiq::numeric
