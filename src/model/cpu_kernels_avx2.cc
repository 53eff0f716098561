// model/cpu_kernels_avx2.cc — the kernels of cpu_kernels.h on AVX2 + FMA +
// F16C: 16 lanes as two 8-float registers (lanes 0–7 and 8–15), so that the
// first step of the sum's tree is their lane-wise addition.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "model/cpu_kernels.h"

// Only the kernels are compiled for the wider instruction set (see
// cpu_kernels_impl.h); the table accessor at the bottom stays baseline x86-64.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace hiq::cpu::kernels {
namespace {

struct Avx2Lanes {
  struct Reg {
    __m256 lo, hi;
  };
  static constexpr int kTokens = 4;  // 8 accumulators of 16 lanes would take all 16 registers
  static constexpr int kRows = 4;
  static constexpr int kTokenBlockRows = 1;

  static Reg zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static Reg broadcast(float f) { return {_mm256_set1_ps(f), _mm256_set1_ps(f)}; }
  static Reg load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static __m256 widen_bf16(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
  static Reg load_bf16(const uint16_t* p) {
    return {widen_bf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            widen_bf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
  }
  static Reg load_f16(const uint16_t* p) {
    return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
  }
  static Reg fma(const Reg& a, const Reg& b, const Reg& c) {
    return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
  }
  static float sum(const Reg& a) {
    const __m256 s8 = _mm256_add_ps(a.lo, a.hi);                                         // l + (l + 8)
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));  // l + (l + 4)
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                             // l + (l + 2)
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));                     // 0 + 1
  }
  static void keep_in_register(Reg& a) { asm("" : "+x"(a.lo), "+x"(a.hi)); }
  static void store(float* p, const Reg& a) {
    _mm256_storeu_ps(p, a.lo);
    _mm256_storeu_ps(p + 8, a.hi);
  }
};

}  // namespace
}  // namespace hiq::cpu::kernels

#include "model/cpu_kernels_impl.h"

namespace hiq::cpu::kernels {
namespace {

const Table& avx2_lanes_table() {
  static const Table table = make_table<Avx2Lanes>("avx2");
  return table;
}

}  // namespace
}  // namespace hiq::cpu::kernels

#pragma GCC pop_options

namespace hiq::cpu::kernels {

const Table* avx2_table() {
  static const bool supported =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return supported ? &avx2_lanes_table() : nullptr;
}

}  // namespace hiq::cpu::kernels
