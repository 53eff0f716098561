// Every vectorised implementation produces exactly the scalar reference's bytes
// (encode) and values (decode), for every codec, shape and kind of data.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <tuple>

#include "codec/codec.h"
#include "codec_test_data.h"

namespace hiq {
namespace {

using testing::RowKind;

// One vector implementation, one codec, one row shape; compared with the scalar
// reference. head_dim 8 and 40 are not multiples of 16: under AVX-512 they
// exercise the hand-over to the AVX2 kernels.
struct IdentityCase {
  CodecImpl impl;
  CodecKind codec;
  RowShape shape;
};

std::vector<IdentityCase> identity_cases() {
  const RowShape shapes[] = {{8, 128}, {1, 576}, {4, 64}, {2, 256}, {3, 40}, {2, 96}, {1, 8}, {1, 1024}, {5, 16}};
  std::vector<IdentityCase> out;
  for (CodecImpl impl : {CodecImpl::kAvx2, CodecImpl::kAvx512})
    for (CodecKind c : kAllCodecs)
      for (RowShape s : shapes)
        if (RecordLayout::make(c, s).is_ok()) out.push_back({impl, c, s});
  return out;
}

class CodecIdentity : public ::testing::TestWithParam<IdentityCase> {
 protected:
  void SetUp() override {
    if (!codec_impl_supported(GetParam().impl))
      GTEST_SKIP() << "this CPU or build has no " << codec_impl_name(GetParam().impl);
  }
};

std::string describe(const ::testing::TestParamInfo<IdentityCase>& info) {
  return std::string(codec_impl_name(info.param.impl)) + "_" + std::string(codec_name(info.param.codec)) + "_" +
         std::to_string(info.param.shape.num_heads) + "x" + std::to_string(info.param.shape.head_dim);
}

TEST_P(CodecIdentity, EncodeIsByteIdenticalAndDecodeBitIdentical) {
  const auto [impl, codec, shape] = GetParam();
  const RecordLayout layout = *RecordLayout::make(codec, shape, kDefaultRecordAlign);
  constexpr size_t kRows = 64;
  for (RowKind kind : testing::kAllRowKinds) {
    SCOPED_TRACE(testing::row_kind_name(kind));
    const auto rows = testing::make_rows(kind, shape, kRows, 1234u + static_cast<uint32_t>(kind));
    std::vector<std::byte> ref(layout.record_bytes * kRows, std::byte{0xAB}), vec(ref.size(), std::byte{0xCD});
    CodecStats ref_stats, vec_stats;
    encode_rows(layout, rows.data(), shape.elements(), kRows, ref.data(), &ref_stats, CodecImpl::kScalar);
    encode_rows(layout, rows.data(), shape.elements(), kRows, vec.data(), &vec_stats, impl);
    ASSERT_EQ(std::memcmp(ref.data(), vec.data(), ref.size()), 0) << "encoded records differ";
    EXPECT_EQ(ref_stats.nonfinite_heads, vec_stats.nonfinite_heads);
    EXPECT_EQ(ref_stats.out_of_range_heads, vec_stats.out_of_range_heads);

    std::vector<uint16_t> ref_out(rows.size()), vec_out(rows.size());
    decode_rows(layout, ref.data(), kRows, ref_out.data(), shape.elements(), CodecImpl::kScalar);
    decode_rows(layout, ref.data(), kRows, vec_out.data(), shape.elements(), impl);
    ASSERT_EQ(ref_out, vec_out) << "decoded rows differ";
  }
}

TEST_P(CodecIdentity, NonFiniteHeadsEncodeIdentically) {
  const auto [impl, codec, shape] = GetParam();
  const RecordLayout layout = *RecordLayout::make(codec, shape, kDefaultRecordAlign);
  auto rows = testing::make_rows(RowKind::kGaussian, shape, 4, 99);
  const uint16_t specials[] = {0x7FC0, 0x7F80, 0xFF80, 0x7F81};
  for (size_t r = 0; r < 4; ++r) rows[r * shape.elements() + r % shape.elements()] = specials[r];
  std::vector<std::byte> ref(layout.record_bytes * 4), vec(ref.size());
  CodecStats a, b;
  encode_rows(layout, rows.data(), shape.elements(), 4, ref.data(), &a, CodecImpl::kScalar);
  encode_rows(layout, rows.data(), shape.elements(), 4, vec.data(), &b, impl);
  EXPECT_EQ(std::memcmp(ref.data(), vec.data(), ref.size()), 0);
  EXPECT_EQ(a.nonfinite_heads, 4u);
  EXPECT_EQ(b.nonfinite_heads, 4u);
}

// Arbitrary bytes (a corrupt record) must still decode the same way everywhere.
TEST_P(CodecIdentity, ArbitraryRecordBytesDecodeIdentically) {
  const auto [impl, codec, shape] = GetParam();
  const RecordLayout layout = *RecordLayout::make(codec, shape, kDefaultRecordAlign);
  std::mt19937 rng(5);
  std::vector<std::byte> records(layout.record_bytes * 16);
  for (auto& b : records) b = static_cast<std::byte>(rng());
  std::vector<uint16_t> ref(shape.elements() * 16), vec(ref.size());
  decode_rows(layout, records.data(), 16, ref.data(), shape.elements(), CodecImpl::kScalar);
  decode_rows(layout, records.data(), 16, vec.data(), shape.elements(), impl);
  EXPECT_EQ(ref, vec);
}

INSTANTIATE_TEST_SUITE_P(AllCodecsAndShapes, CodecIdentity, ::testing::ValuesIn(identity_cases()), describe);

// Demotion's re-encoding equals a decode then an encode, byte for byte, for
// every pair of codecs, every implementation and every kind of data, with
// records packed or strided (token-major records sit a token apart).
TEST(CodecTranscode, EqualsDecodeThenEncode) {
  const RowShape shape{4, 64};
  constexpr size_t kRows = 48;
  for (CodecImpl impl : {CodecImpl::kScalar, CodecImpl::kAvx2, CodecImpl::kAvx512}) {
    if (!codec_impl_supported(impl)) continue;
    for (CodecKind from_codec : kAllCodecs)
      for (CodecKind to_codec : kAllCodecs) {
        SCOPED_TRACE(std::string(codec_impl_name(impl)) + " " + std::string(codec_name(from_codec)) + " -> " +
                     std::string(codec_name(to_codec)));
        const RecordLayout from = *RecordLayout::make(from_codec, shape), to = *RecordLayout::make(to_codec, shape);
        for (RowKind kind : testing::kAllRowKinds) {
          const auto rows = testing::make_rows(kind, shape, kRows, 77u + static_cast<uint32_t>(kind));
          const size_t src_stride = from.record_bytes + 32, dst_stride = to.record_bytes + 16;
          std::vector<std::byte> src(src_stride * kRows);
          for (size_t i = 0; i < kRows; ++i)
            encode_rows(from, rows.data() + i * shape.elements(), shape.elements(), 1, src.data() + i * src_stride);
          // The reference: decode every record, then encode the rows.
          std::vector<uint16_t> decoded(rows.size());
          for (size_t i = 0; i < kRows; ++i)
            decode_rows(from, src.data() + i * src_stride, 1, decoded.data() + i * shape.elements(), shape.elements(),
                        CodecImpl::kScalar);
          std::vector<std::byte> want(to.record_bytes * kRows);
          CodecStats want_stats;
          encode_rows(to, decoded.data(), shape.elements(), kRows, want.data(), &want_stats, CodecImpl::kScalar);

          std::vector<std::byte> got(dst_stride * kRows, std::byte{0x5A});
          CodecStats got_stats;
          transcode_rows(from, src.data(), src_stride, to, got.data(), dst_stride, kRows, &got_stats, impl);
          for (size_t i = 0; i < kRows; ++i) {
            ASSERT_EQ(std::memcmp(got.data() + i * dst_stride, want.data() + i * to.record_bytes, to.record_bytes), 0)
                << testing::row_kind_name(kind) << ", record " << i;
            ASSERT_EQ(got[i * dst_stride + to.record_bytes], std::byte{0x5A}) << "wrote past the record";
          }
          EXPECT_EQ(got_stats.rows, kRows);
          EXPECT_EQ(got_stats.nonfinite_heads, want_stats.nonfinite_heads);
        }
      }
  }
}

TEST(CodecDispatch, AutoResolvesToASupportedImplementation) {
  EXPECT_TRUE(codec_impl_supported(best_codec_impl()));
  EXPECT_NE(best_codec_impl(), CodecImpl::kAuto);
}

}  // namespace
}  // namespace hiq
