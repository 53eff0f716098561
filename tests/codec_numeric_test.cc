// BF16 and FP8 E4M3 conversions against independent definitions.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "codec/numeric.h"

namespace hiq::numeric {
namespace {

// Nearest E4M3 magnitude code by exhaustive search, ties to the even code:
// an independent definition of float_to_e4m3 for finite inputs below 448.
uint8_t nearest_e4m3_code(float f) {
  const double a = std::fabs(static_cast<double>(f));
  int best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= 0x7E; ++c) {
    const double err = std::fabs(static_cast<double>(e4m3_to_float(static_cast<uint8_t>(c))) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>((std::signbit(f) ? 0x80 : 0) | best);
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie → even
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie → even (up)
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F808001u)), 0x3F81);  // above the tie
  EXPECT_EQ(float_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x7F7FFFFFu)), 0x7F80);  // overflow → +Inf
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x00000001u)), 0x0000);  // smallest subnormal → 0
}

TEST(Bf16, NanStaysNan) {
  for (uint32_t bits : {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7F810000u}) {
    const uint16_t h = float_to_bf16(std::bit_cast<float>(bits));
    EXPECT_FALSE(bf16_is_finite(h));
    EXPECT_TRUE(std::isnan(bf16_to_float(h))) << std::hex << bits;
  }
}

TEST(Bf16, DecoderRoundingSaturatesAndCanonicalisesNan) {
  EXPECT_EQ(float_to_bf16_saturate(std::bit_cast<float>(0x7F7F7FFFu)), 0x7F7F);  // rounds down anyway
  EXPECT_EQ(float_to_bf16_saturate(std::bit_cast<float>(0x7F7F8000u)), 0x7F7F);  // tie would go to +Inf
  EXPECT_EQ(float_to_bf16_saturate(std::bit_cast<float>(0x7F7FFFFFu)), 0x7F7F);
  EXPECT_EQ(float_to_bf16_saturate(std::bit_cast<float>(0xFF7F8000u)), 0xFF7F);
  EXPECT_EQ(float_to_bf16_saturate(std::numeric_limits<float>::infinity()), 0x7F80);  // Inf is not finite input
  EXPECT_EQ(float_to_bf16_saturate(-std::numeric_limits<float>::infinity()), 0xFF80);
  for (uint32_t nan : {0x7FC00000u, 0xFFC00001u, 0x7F800001u, 0xFFFFFFFFu})
    EXPECT_EQ(float_to_bf16_saturate(std::bit_cast<float>(nan)), kBf16QuietNan) << std::hex << nan;
  std::mt19937 rng(2);
  for (int i = 0; i < 100000; ++i) {  // elsewhere it is float_to_bf16
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::fabs(f) < 3.3e38f) {
      ASSERT_EQ(float_to_bf16_saturate(f), float_to_bf16(f)) << f;
    }
  }
}

TEST(Bf16, EveryBf16SurvivesTheRoundTripThroughFloat) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    if (!bf16_is_finite(static_cast<uint16_t>(h))) continue;
    EXPECT_EQ(float_to_bf16(bf16_to_float(static_cast<uint16_t>(h))), h);
  }
}

// IEEE half from its definition: (-1)^s · 2^(e-15) · (1 + m/1024), or
// 2^-14 · m/1024 when e = 0; e = 31 is ±Inf (m = 0) or NaN.
TEST(F16, DecodesEveryHalfByTheDefinition) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const int e = static_cast<int>((h >> 10) & 0x1F), m = static_cast<int>(h & 0x3FF);
    const float f = f16_to_float(static_cast<uint16_t>(h));
    EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
    if (e == 0x1F) {
      EXPECT_TRUE(m == 0 ? std::isinf(f) : std::isnan(f)) << h;
      continue;
    }
    const double magnitude = e == 0 ? std::ldexp(m / 1024.0, -14) : std::ldexp(1.0 + m / 1024.0, e - 15);
    EXPECT_EQ(static_cast<double>(std::fabs(f)), magnitude) << h;
  }
}

// E4M3 value from its definition: (-1)^s · 2^(e-7) · (1 + m/8), or 2^-6 · m/8 when e = 0.
TEST(E4m3, DecodesEveryCodeByTheDefinition) {
  for (int c = 0; c < 256; ++c) {
    const int e = (c >> 3) & 0xF, m = c & 7;
    if (e == 0xF && m == 7) continue;
    const double magnitude = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
    EXPECT_EQ(static_cast<double>(e4m3_to_float(static_cast<uint8_t>(c))), (c & 0x80) ? -magnitude : magnitude) << c;
  }
}

TEST(E4m3, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(e4m3_to_float(static_cast<uint8_t>(c))));
      continue;
    }
    EXPECT_EQ(float_to_e4m3(e4m3_to_float(static_cast<uint8_t>(c))), c) << c;
  }
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), 0x1p-9f);
  EXPECT_EQ(e4m3_to_float(0x08), 0x1p-6f);
}

TEST(E4m3, SaturatesAndKeepsNan) {
  EXPECT_EQ(float_to_e4m3(448.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3(463.9f), 0x7E);
  EXPECT_EQ(float_to_e4m3(1e9f), 0x7E);
  EXPECT_EQ(float_to_e4m3(-1e9f), 0xFE);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(float_to_e4m3(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(float_to_e4m3(std::nanf("")) & 0x7F, 0x7F);
}

TEST(E4m3, SubnormalTiesGoToEven) {
  EXPECT_EQ(float_to_e4m3(0x1p-10f), 0x00);        // between 0 and 2^-9
  EXPECT_EQ(float_to_e4m3(3 * 0x1p-10f), 0x02);    // between 1 and 2 units
  EXPECT_EQ(float_to_e4m3(15 * 0x1p-10f), 0x08);   // between 7 units and 2^-6
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
}

TEST(E4m3, MatchesExhaustiveNearestSearchOnRandomFloats) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-14.0f, 8.9f);
  for (int i = 0; i < 20000; ++i) {
    const float f = std::exp2(exponent(rng)) * ((rng() & 1) ? -1.0f : 1.0f);
    if (std::fabs(f) >= 448.0f) continue;
    ASSERT_EQ(float_to_e4m3(f), nearest_e4m3_code(f)) << f;
  }
  // Every midpoint between neighbouring codes, exactly.
  for (int c = 0; c < 0x7E; ++c) {
    const float mid = 0.5f * (e4m3_to_float(static_cast<uint8_t>(c)) + e4m3_to_float(static_cast<uint8_t>(c + 1)));
    ASSERT_EQ(float_to_e4m3(mid), nearest_e4m3_code(mid)) << mid;
  }
}

TEST(HadamardNorm, IsExactForPowersOfFour) {
  EXPECT_EQ(hadamard_norm(64), 0.125f);
  EXPECT_EQ(hadamard_norm(256), 0.0625f);
  EXPECT_EQ(hadamard_norm(128), static_cast<float>(1.0 / std::sqrt(128.0)));
}

}  // namespace
}  // namespace hiq::numeric
