// tests/codec_test_data.h — rows that exercise codecs: ordinary Gaussian KV,
// outliers, all-zero heads, tiny and huge magnitudes, subnormals and arbitrary
// finite bit patterns. Deterministic for a given seed.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "codec/numeric.h"
#include "kv/geometry.h"

namespace hiq::testing {

enum class RowKind {
  kGaussian,      // N(0, σ²) with σ from 1e-3 to 1e2, per head
  kOutliers,      // Gaussian plus a few channels 50× larger (like real K)
  kZeroHeads,     // some heads all zero, others Gaussian
  kTiny,          // |x| around 1e-36 and bf16 subnormals
  kHuge,          // |x| up to the largest finite bf16
  kRandomBits,    // any finite bf16 bit pattern
};
inline constexpr RowKind kAllRowKinds[] = {RowKind::kGaussian, RowKind::kOutliers, RowKind::kZeroHeads,
                                           RowKind::kTiny,     RowKind::kHuge,     RowKind::kRandomBits};

inline std::string row_kind_name(RowKind k) {
  switch (k) {
    case RowKind::kGaussian: return "gaussian";
    case RowKind::kOutliers: return "outliers";
    case RowKind::kZeroHeads: return "zero_heads";
    case RowKind::kTiny: return "tiny";
    case RowKind::kHuge: return "huge";
    case RowKind::kRandomBits: return "random_bits";
  }
  return "?";
}

inline uint16_t bf16(float f) { return numeric::float_to_bf16(f); }

// `rows` rows of `shape`, contiguous.
inline std::vector<uint16_t> make_rows(RowKind kind, RowShape shape, size_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  const int dim = shape.head_dim;
  std::vector<uint16_t> out(shape.elements() * rows);
  for (size_t r = 0; r < rows; ++r) {
    for (int h = 0; h < shape.num_heads; ++h) {
      uint16_t* x = out.data() + r * shape.elements() + static_cast<size_t>(h) * dim;
      const float sigma = std::pow(10.0f, -3.0f + 5.0f * uniform(rng));
      for (int d = 0; d < dim; ++d) {
        float v = 0.0f;
        switch (kind) {
          case RowKind::kGaussian:
            v = sigma * normal(rng);
            break;
          case RowKind::kOutliers:
            v = sigma * normal(rng) * (d % 37 == 5 ? 50.0f : 1.0f);
            break;
          case RowKind::kZeroHeads:
            v = (h % 2 == 0) ? 0.0f : sigma * normal(rng);
            break;
          case RowKind::kTiny: {
            // Half the heads ordinary tiny numbers, half bf16 subnormals.
            if (h % 2 == 0) {
              v = 1e-36f * normal(rng);
            } else {
              x[d] = static_cast<uint16_t>((rng() & 0x8000u) | (rng() & 0x7Fu));  // exponent 0
              continue;
            }
            break;
          }
          case RowKind::kHuge:
            v = 3.3e38f * (2.0f * uniform(rng) - 1.0f);
            if (d == 0) v = std::bit_cast<float>(0x7F7F0000u);  // largest finite bf16
            break;
          case RowKind::kRandomBits: {
            uint16_t bits;
            do bits = static_cast<uint16_t>(rng()); while (!numeric::bf16_is_finite(bits));
            x[d] = bits;
            continue;
          }
        }
        x[d] = bf16(v);
      }
    }
  }
  return out;
}

}  // namespace hiq::testing
