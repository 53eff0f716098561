// Error bounds of each codec (docs/formats.md), checked element by element over
// many random rows; known-answer records that pin the byte layout; non-finite
// input; and the behaviours the formats promise (zeros, padding, saturation).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "codec/codec.h"
#include "codec/numeric.h"
#include "codec_test_data.h"

namespace hiq {
namespace {

using numeric::bf16_to_float;
using testing::RowKind;

double scale_at(const RecordLayout& layout, const std::byte* record, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(record + layout.scale_offset + 2 * i);
  return bf16_to_float(static_cast<uint16_t>(p[0] | (p[1] << 8)));
}

struct RoundTrip {
  RecordLayout layout;
  std::vector<uint16_t> input, output;
  std::vector<std::byte> records;
  CodecStats stats;
};

RoundTrip round_trip(CodecKind codec, RowShape shape, std::vector<uint16_t> rows) {
  RoundTrip t{*RecordLayout::make(codec, shape), std::move(rows), {}, {}, {}};
  const size_t n = t.input.size() / shape.elements();
  t.records.resize(t.layout.record_bytes * n);
  t.output.resize(t.input.size());
  encode_rows(t.layout, t.input.data(), shape.elements(), n, t.records.data(), &t.stats);
  decode_rows(t.layout, t.records.data(), n, t.output.data(), shape.elements());
  return t;
}

// Calls check(x, x̂, scale, element) for every element of every row.
template <typename Check>
void for_each_element(const RoundTrip& t, Check check) {
  const RowShape s = t.layout.shape;
  const size_t n = t.input.size() / s.elements();
  for (size_t r = 0; r < n; ++r) {
    const std::byte* record = t.records.data() + r * t.layout.record_bytes;
    for (int h = 0; h < s.num_heads; ++h)
      for (int d = 0; d < s.head_dim; ++d) {
        const size_t i = r * s.elements() + static_cast<size_t>(h) * s.head_dim + d;
        const int groups = t.layout.groups_per_head;  // int8/fp8: one scale per head
        const size_t g = static_cast<size_t>(h) * groups + (groups > 1 ? d / kInt4GroupSize : 0);
        check(static_cast<double>(bf16_to_float(t.input[i])), static_cast<double>(bf16_to_float(t.output[i])),
              scale_at(t.layout, record, g), i);
      }
  }
}

class CodecBounds : public ::testing::TestWithParam<RowKind> {};

constexpr RowShape kQwen3{8, 128};
constexpr size_t kRows = 256;

TEST_P(CodecBounds, Bf16IsExact) {
  const auto t = round_trip(CodecKind::kBf16, kQwen3, testing::make_rows(GetParam(), kQwen3, kRows, 1));
  EXPECT_EQ(t.input, t.output);
}

TEST_P(CodecBounds, Int8WithinHalfStepPlusRounding) {
  const auto t = round_trip(CodecKind::kInt8, kQwen3, testing::make_rows(GetParam(), kQwen3, kRows, 2));
  for_each_element(t, [](double x, double y, double s, size_t i) {
    ASSERT_TRUE(std::isfinite(y)) << i;
    ASSERT_LE(std::fabs(y - x), (0.5 + 0x1p-8) * s + 0x1p-8 * std::fabs(y)) << "element " << i << " x=" << x;
  });
}

TEST_P(CodecBounds, Fp8WithinRelativeStepPlusSubnormalStep) {
  const auto t = round_trip(CodecKind::kFp8, kQwen3, testing::make_rows(GetParam(), kQwen3, kRows, 3));
  for_each_element(t, [](double x, double y, double s, size_t i) {
    ASSERT_TRUE(std::isfinite(y)) << i;
    ASSERT_LE(std::fabs(y - x), (0x1p-4 + 0x1p-23) * std::fabs(x) + 0x1p-10 * s + 0x1p-8 * std::fabs(y))
        << "element " << i << " x=" << x;
  });
}

TEST_P(CodecBounds, Int4WithinHalfStepOfItsGroup) {
  const auto t = round_trip(CodecKind::kInt4, kQwen3, testing::make_rows(GetParam(), kQwen3, kRows, 4));
  for_each_element(t, [](double x, double y, double s, size_t i) {
    ASSERT_TRUE(std::isfinite(y)) << i;
    ASSERT_LE(std::fabs(y - x), (0.5 + 0x1p-8) * s + 0x1p-8 * std::fabs(y)) << "element " << i << " x=" << x;
  });
}

// int4h: the rotation is orthonormal, so the error of a head in the 2-norm is at
// most the quantisation error of the rotated vector, plus BF16 output rounding
// and float rounding in the two transforms.
TEST_P(CodecBounds, Int4hHeadErrorWithinRotatedQuantisationError) {
  const RowKind kind = GetParam();
  const auto t = round_trip(CodecKind::kInt4H, kQwen3, testing::make_rows(kind, kQwen3, kRows, 5));
  const RowShape s = kQwen3;
  const size_t n = t.input.size() / s.elements();
  uint64_t out_of_range = 0;
  for (size_t r = 0; r < n; ++r) {
    const std::byte* record = t.records.data() + r * t.layout.record_bytes;
    for (int h = 0; h < s.num_heads; ++h) {
      double err2 = 0, x2 = 0, y2 = 0, quant2 = 0, xmax = 0;
      for (int d = 0; d < s.head_dim; ++d) {
        const size_t i = r * s.elements() + static_cast<size_t>(h) * s.head_dim + d;
        const double x = bf16_to_float(t.input[i]), y = bf16_to_float(t.output[i]);
        err2 += (y - x) * (y - x);
        x2 += x * x;
        y2 += y * y;
        xmax = std::max(xmax, std::fabs(x));
      }
      if (xmax >= 0x1p64) {  // documented range limit: the head decodes to NaN
        ++out_of_range;
        for (int d = 0; d < s.head_dim; ++d)
          ASSERT_TRUE(std::isnan(bf16_to_float(t.output[r * s.elements() + static_cast<size_t>(h) * s.head_dim + d])));
        continue;
      }
      for (int g = 0; g < t.layout.groups_per_head; ++g) {
        const double step = (0.5 + 0x1p-8) * scale_at(t.layout, record, static_cast<size_t>(h) * t.layout.groups_per_head + g);
        quant2 += kInt4GroupSize * step * step;
      }
      const double log2_dim = std::log2(s.head_dim);
      const double bound = std::sqrt(quant2) + 0x1p-8 * std::sqrt(y2) + (log2_dim + 1) * 0x1p-22 * std::sqrt(x2);
      ASSERT_LE(std::sqrt(err2), bound) << "row " << r << " head " << h;
    }
  }
  EXPECT_EQ(t.stats.out_of_range_heads, out_of_range);
  if (kind == RowKind::kHuge) {
    EXPECT_GT(out_of_range, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(AllKindsOfData, CodecBounds, ::testing::ValuesIn(testing::kAllRowKinds),
                         [](const auto& p) { return testing::row_kind_name(p.param); });

// ---- known answers: the byte layout of docs/formats.md, computed by hand ----------

std::vector<uint16_t> one_head(std::initializer_list<float> values) {
  std::vector<uint16_t> out;
  for (float v : values) out.push_back(numeric::float_to_bf16(v));
  return out;
}

std::vector<uint8_t> bytes_of(const RoundTrip& t) {
  std::vector<uint8_t> out(t.records.size());
  std::memcpy(out.data(), t.records.data(), out.size());
  return out;
}

TEST(CodecKnownAnswer, Int8Record) {
  // amax 4 → scale bf16(4/127) = 0x3D01 (0.031494140625); codes rint(x / scale).
  const auto t = round_trip(CodecKind::kInt8, {1, 8}, one_head({1, 2, 3, 4, -4, -3, -2, -1}));
  const std::vector<uint8_t> expect = {32, 64, 95, 127, 0x81, 0xA1, 0xC0, 0xE0,  // int8 codes
                                       0x01, 0x3D,                                // scale, little-endian
                                       0, 0, 0, 0, 0, 0};                         // padding to 16
  EXPECT_EQ(bytes_of(t), expect);
}

TEST(CodecKnownAnswer, Int4Record) {
  // amax 4 → scale bf16(4/7) = 0x3F12 (0.5703125); codes q+8, element 2i in the low nibble.
  const auto t = round_trip(CodecKind::kInt4, {1, 8}, one_head({1, 2, 3, 4, -4, -3, -2, -1}));
  const std::vector<uint8_t> expect = {0xCA, 0xFD, 0x31, 0x64, 0x12, 0x3F, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(bytes_of(t), expect);
}

TEST(CodecKnownAnswer, Fp8Record) {
  // amax 4 → scale bf16(4/448) = 0x3C12 (0.0089111328125); 4/scale = 448.9 saturates to 0x7E.
  const auto t = round_trip(CodecKind::kFp8, {1, 8}, one_head({1, 2, 3, 4, -4, -3, -2, -1}));
  const auto b = bytes_of(t);
  EXPECT_EQ(b[3], 0x7E);
  EXPECT_EQ(b[4], 0xFE);
  EXPECT_EQ(b[0], 0x6E);  // 1 / scale = 112.2 → 112 = 2^6 · 1.75: exponent 13, mantissa 6
  EXPECT_EQ(b[8], 0x12);
  EXPECT_EQ(b[9], 0x3C);
}

TEST(CodecKnownAnswer, Int4hOfAConstantHeadIsASingleSpike) {
  // H·(c,…,c)/√n = (c√n, 0, …, 0): one code at +7 and the rest at 0 (stored 8).
  std::vector<uint16_t> head(64, numeric::float_to_bf16(0.5f));
  const auto t = round_trip(CodecKind::kInt4H, {1, 64}, head);
  const auto b = bytes_of(t);
  EXPECT_EQ(b[0], 0x8F);
  for (int i = 1; i < 32; ++i) EXPECT_EQ(b[i], 0x88) << i;
  for (uint16_t v : t.output) EXPECT_NEAR(bf16_to_float(v), 0.5, 0.5 * 0x1p-7);
}

// ---- special values -----------------------------------------------------------

class CodecSpecials : public ::testing::TestWithParam<CodecKind> {};

TEST_P(CodecSpecials, NonFiniteHeadDecodesToNanAndIsCounted) {
  const CodecKind codec = GetParam();
  auto rows = testing::make_rows(RowKind::kGaussian, kQwen3, 3, 11);
  rows[1 * 128 + 7] = 0x7FC0;                     // row 0, head 1: NaN
  rows[kQwen3.elements() + 5 * 128] = 0xFF80;     // row 1, head 5: −Inf
  rows[2 * kQwen3.elements() + 127] = 0x7F80;     // row 2, head 0: +Inf
  const auto t = round_trip(codec, kQwen3, rows);
  EXPECT_EQ(t.stats.nonfinite_heads, 3u);
  EXPECT_EQ(t.stats.rows, 3u);
  const auto head_is_nan = [&](size_t row, int h) {
    for (int d = 0; d < 128; ++d)
      if (!std::isnan(bf16_to_float(t.output[row * kQwen3.elements() + h * 128 + d]))) return false;
    return true;
  };
  if (codec == CodecKind::kBf16) {
    EXPECT_EQ(t.output, t.input);  // kept exactly, still non-finite
    return;
  }
  EXPECT_TRUE(head_is_nan(0, 1));
  EXPECT_TRUE(head_is_nan(1, 5));
  EXPECT_TRUE(head_is_nan(2, 0));
  // Other heads are untouched by their neighbour's NaN.
  for (int d = 0; d < 128; ++d) {
    EXPECT_TRUE(std::isfinite(bf16_to_float(t.output[0 * 128 + d])));
    EXPECT_TRUE(std::isfinite(bf16_to_float(t.output[2 * 128 + d])));
  }
}

TEST_P(CodecSpecials, ZeroHeadsDecodeToZero) {
  std::vector<uint16_t> rows(kQwen3.elements() * 2, 0);
  rows[5] = 0x8000;  // −0
  const auto t = round_trip(GetParam(), kQwen3, rows);
  for (uint16_t v : t.output) EXPECT_EQ(bf16_to_float(v), 0.0f);
  EXPECT_EQ(t.stats.nonfinite_heads, 0u);
}

TEST_P(CodecSpecials, LargestBf16StaysFinite) {
  if (GetParam() == CodecKind::kInt4H) GTEST_SKIP() << "int4h marks |x| ≥ 2^64 out of range";
  std::vector<uint16_t> rows(kQwen3.elements(), 0);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = (i % 3 == 0) ? 0x7F7F : (i % 3 == 1 ? 0xFF7F : 0x7F00);
  const auto t = round_trip(GetParam(), kQwen3, rows);
  for (size_t i = 0; i < rows.size(); ++i) {
    const float y = bf16_to_float(t.output[i]);
    ASSERT_TRUE(std::isfinite(y)) << i;
    // Half an int4 step of the head's amax is the loosest of the codecs' bounds.
    EXPECT_NEAR(y, bf16_to_float(rows[i]), 0.075 * bf16_to_float(0x7F7F)) << i;
  }
}

TEST_P(CodecSpecials, PaddingIsZeroAndEncodingIsDeterministic) {
  const RecordLayout layout = *RecordLayout::make(GetParam(), {3, 40 + 24 * (GetParam() == CodecKind::kInt4H)}, 128);
  const auto rows = testing::make_rows(RowKind::kGaussian, layout.shape, 4, 3);
  std::vector<std::byte> a(layout.record_bytes * 4, std::byte{0xFF}), b(a.size(), std::byte{0x11});
  encode_rows(layout, rows.data(), layout.shape.elements(), 4, a.data());
  encode_rows(layout, rows.data(), layout.shape.elements(), 4, b.data());
  EXPECT_EQ(a, b);
  for (size_t r = 0; r < 4; ++r)
    for (size_t i = layout.used_bytes(); i < layout.record_bytes; ++i)
      ASSERT_EQ(a[r * layout.record_bytes + i], std::byte{0}) << "row " << r << " byte " << i;
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, CodecSpecials, ::testing::ValuesIn(kAllCodecs),
                         [](const auto& p) { return std::string(codec_name(p.param)); });

// ---- the point of int4h --------------------------------------------------------

double mean_squared_error(CodecKind codec, const std::vector<uint16_t>& rows) {
  const auto t = round_trip(codec, kQwen3, rows);
  double sum = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const double e = bf16_to_float(t.output[i]) - bf16_to_float(rows[i]);
    sum += e * e;
  }
  return sum / static_cast<double>(rows.size());
}

TEST(Int4h, BeatsPlainInt4OnKeysWithOutlierChannels) {
  const auto rows = testing::make_rows(RowKind::kOutliers, kQwen3, 512, 21);
  const double plain = mean_squared_error(CodecKind::kInt4, rows);
  const double rotated = mean_squared_error(CodecKind::kInt4H, rows);
  EXPECT_LT(rotated, 0.8 * plain) << "int4 " << plain << " int4h " << rotated;
}

TEST(Int4h, OutOfRangeHeadIsCounted) {
  std::vector<uint16_t> rows(kQwen3.elements(), numeric::float_to_bf16(1.0f));
  rows[3 * 128] = numeric::float_to_bf16(0x1p70f);
  const auto t = round_trip(CodecKind::kInt4H, kQwen3, rows);
  EXPECT_EQ(t.stats.out_of_range_heads, 1u);
  EXPECT_EQ(t.stats.nonfinite_heads, 0u);
  EXPECT_TRUE(std::isnan(bf16_to_float(t.output[3 * 128 + 1])));
  EXPECT_FALSE(std::isnan(bf16_to_float(t.output[2 * 128 + 1])));
}

}  // namespace
}  // namespace hiq
