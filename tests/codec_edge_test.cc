// Edges of the codec API: odd shapes that only the scalar path takes (with the
// gap byte and a half-used last byte), record_align 1 and 2, empty batches,
// strided rows, corrupt records holding special scales and codes, a caller's
// non-default floating-point environment, and layouts not built by make().
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "codec/codec.h"
#include "codec/numeric.h"
#include "codec_test_data.h"

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace hiq {
namespace {

using numeric::bf16_to_float;
using numeric::float_to_bf16;

std::vector<uint8_t> encode_bytes(CodecKind codec, RowShape shape, size_t align, std::initializer_list<float> values) {
  const RecordLayout layout = *RecordLayout::make(codec, shape, align);
  std::vector<uint16_t> row;
  for (float v : values) row.push_back(float_to_bf16(v));
  std::vector<std::byte> record(layout.record_bytes, std::byte{0xEE});
  encode_rows(layout, row.data(), row.size(), 1, record.data());
  std::vector<uint8_t> out(record.size());
  std::memcpy(out.data(), record.data(), out.size());
  return out;
}

TEST(CodecOddShapes, Int4OddLengthRowHasHalfUsedLastByteAndGapByte) {
  // amax 1 → scale bf16(1/7) = 0x3E12 (0.142578125); codes 7, −7, 4, 0, −4 stored +8.
  EXPECT_EQ(encode_bytes(CodecKind::kInt4, {1, 3}, 1, {1, -1, 0.5f}),
            (std::vector<uint8_t>{0x1F, 0x0C, 0x12, 0x3E}));
  EXPECT_EQ(encode_bytes(CodecKind::kInt4, {1, 5}, 1, {1, -1, 0.5f, 0, -0.5f}),
            (std::vector<uint8_t>{0x1F, 0x8C, 0x04, 0x00, 0x12, 0x3E}));
  EXPECT_EQ(encode_bytes(CodecKind::kInt4, {1, 5}, 2, {1, -1, 0.5f, 0, -0.5f}).size(), 6u);
}

TEST(CodecOddShapes, Int8OddShapeAtAlignOne) {
  // Two heads of 3: amax 3 → scale bf16(3/127) = 0.023681640625; an all-zero head
  // → amax floor 2^-112 → scale bf16(2^-112/127).
  const auto bytes = encode_bytes(CodecKind::kInt8, {2, 3}, 1, {3, -1.5f, 0.25f, 0, 0, 0});
  ASSERT_EQ(bytes.size(), 10u);
  EXPECT_EQ(bytes[0], 127);
  EXPECT_EQ(bytes[1], static_cast<uint8_t>(-63));  // −1.5 / 0.02368 = −63.3 → −63
  EXPECT_EQ(bytes[2], 11);                         // 0.25 / 0.02368 = 10.6 → 11
  EXPECT_EQ(bytes[3] | bytes[4] | bytes[5], 0);
  EXPECT_EQ(bytes[6] | (bytes[7] << 8), 0x3CC2);  // 0.023681640625
  EXPECT_EQ(bytes[8] | (bytes[9] << 8), float_to_bf16(0x1p-112f / 127.0f));
}

double scale_of(const RecordLayout& layout, const std::byte* record, size_t i) {
  const auto* p = reinterpret_cast<const uint8_t*>(record + layout.scale_offset + 2 * i);
  return bf16_to_float(static_cast<uint16_t>(p[0] | (p[1] << 8)));
}

// The per-head error bounds of docs/formats.md on shapes only the scalar path takes.
TEST(CodecOddShapes, RoundTripWithinTheDocumentedBounds) {
  for (CodecKind codec : kAllCodecs)
    for (RowShape shape : {RowShape{3, 5}, RowShape{5, 33}, RowShape{1, 1}, RowShape{2, 4}}) {
      auto layout = RecordLayout::make(codec, shape, 1);
      if (!layout) continue;  // int4h needs a power of two
      SCOPED_TRACE(std::string(codec_name(codec)) + " " + std::to_string(shape.num_heads) + "x" +
                   std::to_string(shape.head_dim));
      constexpr size_t kRows = 8;
      const auto rows = testing::make_rows(testing::RowKind::kGaussian, shape, kRows, 17);
      std::vector<std::byte> records(layout->record_bytes * kRows);
      std::vector<uint16_t> out(rows.size());
      encode_rows(*layout, rows.data(), shape.elements(), kRows, records.data());
      decode_rows(*layout, records.data(), kRows, out.data(), shape.elements());
      if (codec == CodecKind::kBf16) {
        EXPECT_EQ(rows, out);
        continue;
      }
      for (size_t r = 0; r < kRows; ++r) {
        const std::byte* record = records.data() + r * layout->record_bytes;
        for (int h = 0; h < shape.num_heads; ++h) {
          double err2 = 0, quant2 = 0, y2 = 0;
          for (int d = 0; d < shape.head_dim; ++d) {
            const size_t i = r * shape.elements() + static_cast<size_t>(h) * shape.head_dim + d;
            const double x = bf16_to_float(rows[i]), y = bf16_to_float(out[i]);
            const int groups = layout->groups_per_head;
            const double s = scale_of(*layout, record, static_cast<size_t>(h) * groups + (groups > 1 ? d / 32 : 0));
            err2 += (y - x) * (y - x);
            y2 += y * y;
            quant2 += ((0.5 + 0x1p-8) * s) * ((0.5 + 0x1p-8) * s);
            const double bound = codec == CodecKind::kFp8 ? (0x1p-4 + 0x1p-23) * std::fabs(x) + 0x1p-10 * s
                                                          : (0.5 + 0x1p-8) * s;
            if (codec != CodecKind::kInt4H) {
              ASSERT_LE(std::fabs(y - x), bound + 0x1p-8 * std::fabs(y)) << i;
            }
          }
          if (codec == CodecKind::kInt4H) {
            ASSERT_LE(std::sqrt(err2), std::sqrt(quant2) + 0x1p-7 * std::sqrt(y2));
          }
        }
      }
    }
}

TEST(CodecBatches, EmptyBatchWritesNothing) {
  const RecordLayout layout = *RecordLayout::make(CodecKind::kInt8, {8, 128});
  std::vector<std::byte> records(layout.record_bytes, std::byte{0x5A});
  CodecStats stats;
  encode_rows(layout, nullptr, 0, 0, records.data(), &stats);
  std::vector<uint16_t> rows(layout.shape.elements(), 0x1234);
  decode_rows(layout, records.data(), 0, rows.data(), 0);
  EXPECT_EQ(stats.rows, 0u);
  for (std::byte b : records) EXPECT_EQ(b, std::byte{0x5A});
  for (uint16_t v : rows) EXPECT_EQ(v, 0x1234);
}

TEST(CodecBatches, StridedRowsLeaveTheGapsAlone) {
  const RowShape shape{4, 64};
  const size_t stride = shape.elements() + 40;
  for (CodecKind codec : kAllCodecs) {
    const RecordLayout layout = *RecordLayout::make(codec, shape);
    const auto packed = testing::make_rows(testing::RowKind::kGaussian, shape, 3, 8);
    std::vector<uint16_t> strided(stride * 3, 0xDEAD);
    for (size_t r = 0; r < 3; ++r)
      std::memcpy(strided.data() + r * stride, packed.data() + r * shape.elements(), shape.elements() * 2);
    std::vector<std::byte> from_packed(layout.record_bytes * 3), from_strided(from_packed.size());
    encode_rows(layout, packed.data(), shape.elements(), 3, from_packed.data());
    encode_rows(layout, strided.data(), stride, 3, from_strided.data());
    EXPECT_EQ(from_packed, from_strided) << codec_name(codec);
    std::vector<uint16_t> out(stride * 3, 0xBEEF);
    decode_rows(layout, from_packed.data(), 3, out.data(), stride);
    for (size_t r = 0; r < 3; ++r)
      for (size_t i = shape.elements(); i < stride; ++i) ASSERT_EQ(out[r * stride + i], 0xBEEF) << codec_name(codec);
  }
}

// Corrupt records: every scale and code pattern a bad record can hold decodes
// identically on every implementation, and every NaN is the canonical 0x7FC0.
TEST(CodecCorruptRecords, SpecialScalesAndCodesDecodeIdenticallyToCanonicalNan) {
  const uint16_t scales[] = {0x7FC0, 0xFFC1, 0x7F81, 0x7F80, 0xFF80, 0x7F7F, 0xFF7F, 0x0001, 0x8000, 0x0000, 0x3F80};
  const uint8_t codes[] = {0x7F, 0xFF, 0x80, 0x00, 0x01, 0x7E, 0xFE, 0x88, 0x0F};
  std::mt19937 rng(9);
  for (CodecKind codec : {CodecKind::kInt8, CodecKind::kFp8, CodecKind::kInt4, CodecKind::kInt4H}) {
    const RecordLayout layout = *RecordLayout::make(codec, {4, 64});
    constexpr size_t kRecords = 64;
    std::vector<std::byte> records(layout.record_bytes * kRecords);
    for (size_t r = 0; r < kRecords; ++r) {
      auto* rec = reinterpret_cast<uint8_t*>(records.data() + r * layout.record_bytes);
      for (size_t i = 0; i < layout.payload_bytes; ++i) rec[i] = codes[rng() % std::size(codes)];
      for (size_t g = 0; g < layout.num_scales; ++g) {
        const uint16_t s = (rng() % 3 == 0) ? static_cast<uint16_t>(rng()) : scales[rng() % std::size(scales)];
        rec[layout.scale_offset + 2 * g] = static_cast<uint8_t>(s & 0xFF);
        rec[layout.scale_offset + 2 * g + 1] = static_cast<uint8_t>(s >> 8);
      }
    }
    std::vector<uint16_t> reference(layout.shape.elements() * kRecords);
    decode_rows(layout, records.data(), kRecords, reference.data(), layout.shape.elements(), CodecImpl::kScalar);
    size_t nans = 0;
    for (uint16_t v : reference) {
      if (!std::isnan(bf16_to_float(v))) continue;
      ++nans;
      ASSERT_EQ(v, numeric::kBf16QuietNan) << codec_name(codec);
    }
    EXPECT_GT(nans, 0u) << "the planted NaN scales and codes must reach the output";
    for (CodecImpl impl : {CodecImpl::kAvx2, CodecImpl::kAvx512}) {
      if (!codec_impl_supported(impl)) continue;
      std::vector<uint16_t> vec(reference.size());
      decode_rows(layout, records.data(), kRecords, vec.data(), layout.shape.elements(), impl);
      EXPECT_EQ(vec, reference) << codec_name(codec) << " " << codec_impl_name(impl);
    }
  }
}

#if defined(__x86_64__)
// A library elsewhere in the process may set flush-to-zero, denormals-are-zero
// or another rounding mode; the codecs must not notice, and must restore it.
TEST(CodecFloatEnvironment, OutputDoesNotDependOnTheCallersMxcsr) {
  const RowShape shape{8, 128};
  for (CodecKind codec : kAllCodecs) {
    const RecordLayout layout = *RecordLayout::make(codec, shape);
    const auto rows = testing::make_rows(testing::RowKind::kTiny, shape, 16, 4);
    std::vector<std::byte> expected(layout.record_bytes * 16), got(expected.size());
    std::vector<uint16_t> expected_rows(rows.size()), got_rows(rows.size());
    encode_rows(layout, rows.data(), shape.elements(), 16, expected.data());
    decode_rows(layout, expected.data(), 16, expected_rows.data(), shape.elements());
    const unsigned saved = _mm_getcsr();
    const unsigned hostile = (saved | 0x8040u /* FTZ, DAZ */ | 0x4000u /* round up */) & ~0x2000u;
    _mm_setcsr(hostile);
    encode_rows(layout, rows.data(), shape.elements(), 16, got.data());
    decode_rows(layout, got.data(), 16, got_rows.data(), shape.elements());
    const unsigned after = _mm_getcsr();
    _mm_setcsr(saved);
    EXPECT_EQ(after, hostile) << "the caller's environment must be restored";
    EXPECT_EQ(got, expected) << codec_name(codec);
    EXPECT_EQ(got_rows, expected_rows) << codec_name(codec);
  }
}
#endif

TEST(CodecLayoutCheckDeathTest, LayoutNotFromMakeIsRejected) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  RecordLayout bad = RecordLayout::compute(CodecKind::kInt4, {1, 2048}, 16);  // head_dim above kMaxHeadDim
  std::vector<uint16_t> row(2048);
  std::vector<std::byte> record(bad.record_bytes);
  EXPECT_DEATH(encode_rows(bad, row.data(), row.size(), 1, record.data()), "RecordLayout::make");
  RecordLayout edited = *RecordLayout::make(CodecKind::kInt8, {8, 128});
  edited.record_bytes = 16;  // fields edited by hand
  EXPECT_DEATH(decode_rows(edited, record.data(), 1, row.data(), row.size()), "RecordLayout::make");
  EXPECT_FALSE(bad.is_valid());
  EXPECT_FALSE(edited.is_valid());
  EXPECT_TRUE(RecordLayout::make(CodecKind::kInt8, {8, 128})->is_valid());
}

}  // namespace
}  // namespace hiq
