// model/cpu_kernels_scalar.cc — the reference implementation of the kernels
// (cpu_kernels.h): 16 lanes as a plain array, each multiply-add std::fma. It
// is what the vector implementations are tested against bit for bit, and what
// runs on a CPU without them (slowly where the CPU has no FMA instruction and
// the C library computes std::fma; every x86-64 CPU since 2013 has AVX2 + FMA).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "codec/numeric.h"
#include "model/cpu_kernels.h"

namespace hiq::cpu::kernels {
namespace {

struct ScalarLanes {
  struct Reg {
    float v[16];
  };
  static constexpr int kTokens = 4;
  static constexpr int kRows = 4;
  static constexpr int kTokenBlockRows = 1;

  static Reg zero() { return broadcast(0.0f); }
  static Reg broadcast(float f) {
    Reg r;
    std::fill(r.v, r.v + 16, f);
    return r;
  }
  static Reg load(const float* p) {
    Reg r;
    std::copy(p, p + 16, r.v);
    return r;
  }
  static Reg load_bf16(const uint16_t* p) {
    Reg r;
    for (int i = 0; i < 16; ++i) r.v[i] = numeric::bf16_to_float(p[i]);
    return r;
  }
  static Reg load_f16(const uint16_t* p) {
    Reg r;
    for (int i = 0; i < 16; ++i) r.v[i] = numeric::f16_to_float(p[i]);
    return r;
  }
  static Reg fma(const Reg& a, const Reg& b, const Reg& c) {
    Reg r;
    for (int i = 0; i < 16; ++i) r.v[i] = std::fma(a.v[i], b.v[i], c.v[i]);
    return r;
  }
  static float sum(const Reg& a) {
    float s8[8], s4[4];
    for (int l = 0; l < 8; ++l) s8[l] = a.v[l] + a.v[l + 8];
    for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
  }
  static void store(float* p, const Reg& a) { std::copy(a.v, a.v + 16, p); }
  static void keep_in_register(Reg&) {}
};

}  // namespace
}  // namespace hiq::cpu::kernels

#include "model/cpu_kernels_impl.h"

namespace hiq::cpu::kernels {

const Table& scalar_table() {
  static const Table table = make_table<ScalarLanes>("scalar");
  return table;
}

const Table& best_table() {
  static const Table& best = avx512_table() != nullptr ? *avx512_table()
                             : avx2_table() != nullptr ? *avx2_table()
                                                       : scalar_table();
  return best;
}

#if !defined(HIQ_HAVE_X86_SIMD)
const Table* avx2_table() { return nullptr; }
const Table* avx512_table() { return nullptr; }
#endif

}  // namespace hiq::cpu::kernels
