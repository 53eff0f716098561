// model/cpu_kernels_avx512.cc — the kernels of cpu_kernels.h on AVX-512 F:
// the 16 lanes are one register.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "model/cpu_kernels.h"

// Only the kernels are compiled for the wider instruction set (see
// cpu_kernels_impl.h); the table accessor at the bottom stays baseline x86-64.
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma,f16c")

namespace hiq::cpu::kernels {
namespace {

struct Avx512Lanes {
  using Reg = __m512;
  static constexpr int kTokens = 8;  // 8 accumulators, a weight register and room to spare of 32
  static constexpr int kRows = 8;
  static constexpr int kTokenBlockRows = 2;  // 16 accumulators: each token's x is loaded once for two rows

  static Reg zero() { return _mm512_setzero_ps(); }
  static Reg broadcast(float f) { return _mm512_set1_ps(f); }
  static Reg load(const float* p) { return _mm512_loadu_ps(p); }
  static Reg load_bf16(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static Reg load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static float sum(Reg a) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a),  // l + (l + 8)
                                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));  // l + (l + 4)
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                             // l + (l + 2)
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));                     // 0 + 1
  }
  static void store(float* p, Reg a) { _mm512_storeu_ps(p, a); }
  // The compiler would otherwise fold the load into each multiply-add, loading it once per use.
  static void keep_in_register(Reg& a) { asm("" : "+v"(a)); }
  // Eight sums side by side, each the tree sum() computes: the same additions
  // of the same lanes, with the registers' halves, quarters and pairs moved
  // next to each other first.
  static void sum8(const Reg* a, float* out) {  // a[0 … 8)
    // l + (l + 8): [x 0–7 | y 0–7] + [x 8–15 | y 8–15] for the pairs (0, 1), (2, 3), …
    Reg s8[4];
    for (int i = 0; i < 4; ++i)
      s8[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                            _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
    // l + (l + 4): quarter k of the result holds register k's (0–3, then 4–7).
    Reg s4[2];
    for (int i = 0; i < 2; ++i)
      s4[i] = _mm512_add_ps(_mm512_shuffle_f32x4(s8[2 * i], s8[2 * i + 1], 0x88),
                            _mm512_shuffle_f32x4(s8[2 * i], s8[2 * i + 1], 0xDD));
    // l + (l + 2): quarter k holds register k's two (lanes 0, 1) and register k + 4's (2, 3).
    const Reg s2 = _mm512_add_ps(_mm512_shuffle_ps(s4[0], s4[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(s4[0], s4[1], _MM_SHUFFLE(3, 2, 3, 2)));
    // 0 + 1: quarter k holds register k's sum in lane 0 and register k + 4's in lane 1.
    const Reg s1 = _mm512_add_ps(_mm512_shuffle_ps(s2, s2, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(s2, s2, _MM_SHUFFLE(3, 1, 3, 1)));
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, s1);
    for (int k = 0; k < 4; ++k) {
      out[k] = lanes[4 * k];
      out[k + 4] = lanes[4 * k + 1];
    }
  }
};

}  // namespace
}  // namespace hiq::cpu::kernels

#include "model/cpu_kernels_impl.h"

namespace hiq::cpu::kernels {
namespace {

const Table& avx512_lanes_table() {
  static const Table table = make_table<Avx512Lanes>("avx512");
  return table;
}

}  // namespace
}  // namespace hiq::cpu::kernels

#pragma GCC pop_options

namespace hiq::cpu::kernels {

const Table* avx512_table() {
  static const bool supported = __builtin_cpu_supports("avx512f") && avx2_table() != nullptr;
  return supported ? &avx512_lanes_table() : nullptr;
}

}  // namespace hiq::cpu::kernels
