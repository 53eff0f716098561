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

TEST(CodecDispatch, AutoResolvesToASupportedImplementation) {
  EXPECT_TRUE(codec_impl_supported(best_codec_impl()));
  EXPECT_NE(best_codec_impl(), CodecImpl::kAuto);
}

}  // namespace
}  // namespace hiq
