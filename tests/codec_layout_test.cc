// Record layouts: sizes, offsets and the errors for shapes a codec cannot take.
#include <gtest/gtest.h>

#include "codec/codec.h"

namespace hiq {
namespace {

TEST(RecordLayout, Qwen3RowSizesMatchTheDocumentedFormats) {
  const RowShape qwen3{8, 128};
  struct Expect {
    CodecKind codec;
    size_t align, payload, scales, record;
  };
  for (const Expect& e : {Expect{CodecKind::kBf16, 16, 2048, 0, 2048}, Expect{CodecKind::kInt8, 16, 1024, 8, 1040},
                          Expect{CodecKind::kInt8, 128, 1024, 8, 1152}, Expect{CodecKind::kFp8, 16, 1024, 8, 1040},
                          Expect{CodecKind::kInt4, 16, 512, 32, 576}, Expect{CodecKind::kInt4H, 16, 512, 32, 576},
                          Expect{CodecKind::kInt4, 128, 512, 32, 640}}) {
    auto layout = RecordLayout::make(e.codec, qwen3, e.align);
    ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
    SCOPED_TRACE(std::string(codec_name(e.codec)) + " align " + std::to_string(e.align));
    EXPECT_EQ(layout->payload_bytes, e.payload);
    EXPECT_EQ(layout->num_scales, e.scales);
    EXPECT_EQ(layout->scale_offset, e.payload);
    EXPECT_EQ(layout->record_bytes, e.record);
    EXPECT_EQ(layout->record_bytes % e.align, 0u);
    EXPECT_EQ(layout->used_bytes() + layout->padding_bytes(), layout->record_bytes);
  }
}

TEST(RecordLayout, Int4GroupsDoNotSpanHeadsAndLastGroupMayBeShort) {
  auto layout = RecordLayout::make(CodecKind::kInt4, {3, 40}, 16);  // 40 = 32 + 8
  ASSERT_TRUE(layout.is_ok());
  EXPECT_EQ(layout->groups_per_head, 2);
  EXPECT_EQ(layout->num_scales, 6u);
  EXPECT_EQ(layout->payload_bytes, 60u);
  EXPECT_EQ(layout->record_bytes, 80u);  // 60 + 12 = 72 → 80
}

TEST(RecordLayout, OddElementCountPadsScalesToAnEvenOffset) {
  auto layout = RecordLayout::make(CodecKind::kInt4, {1, 3}, 1);
  ASSERT_TRUE(layout.is_ok());
  EXPECT_EQ(layout->payload_bytes, 2u);
  EXPECT_EQ(layout->scale_offset, 2u);
  auto odd = RecordLayout::make(CodecKind::kInt4, {1, 5}, 1);
  ASSERT_TRUE(odd.is_ok());
  EXPECT_EQ(odd->payload_bytes, 3u);
  EXPECT_EQ(odd->scale_offset, 4u);
  EXPECT_EQ(odd->record_bytes, 6u);
}

TEST(RecordLayout, MlaLatentRow) {
  auto layout = RecordLayout::make(CodecKind::kInt8, {1, 576}, 16);
  ASSERT_TRUE(layout.is_ok());
  EXPECT_EQ(layout->record_bytes, 592u);  // 576 + 2 → 592
}

TEST(RecordLayout, RejectsWhatNoCodecCanStore) {
  EXPECT_EQ(RecordLayout::make(CodecKind::kInt8, {0, 128}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RecordLayout::make(CodecKind::kInt8, {8, 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RecordLayout::make(CodecKind::kInt8, {1, kMaxHeadDim + 1}).status().code(), StatusCode::kOutOfRange);
  for (size_t bad_align : {size_t{0}, size_t{3}, size_t{100}, size_t{8192}}) {
    auto layout = RecordLayout::make(CodecKind::kInt8, {8, 128}, bad_align);
    EXPECT_EQ(layout.status().code(), StatusCode::kInvalidArgument) << bad_align;
    EXPECT_NE(layout.status().message().find("--record-align"), std::string::npos);
  }
}

TEST(RecordLayout, Int4hNeedsPowerOfTwoHeadDim) {
  auto bad = RecordLayout::make(CodecKind::kInt4H, {8, 96});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("power-of-two"), std::string::npos);
  EXPECT_TRUE(RecordLayout::make(CodecKind::kInt4, {8, 96}).is_ok());
  EXPECT_TRUE(RecordLayout::make(CodecKind::kInt4H, {8, 64}).is_ok());
}

TEST(CodecNames, RoundTripAndRejectUnknown) {
  for (CodecKind c : kAllCodecs) {
    auto parsed = parse_codec(codec_name(c));
    ASSERT_TRUE(parsed.is_ok());
    EXPECT_EQ(*parsed, c);
  }
  auto bad = parse_codec("int3");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("int3"), std::string::npos);
}

TEST(KvCodecSpecs, OneCodecOrOnePerPart) {
  EXPECT_EQ(*parse_kv_codecs("int8"), KvCodecs(CodecKind::kInt8));
  EXPECT_EQ(*parse_kv_codecs("k=int8,v=int4h"), KvCodecs(CodecKind::kInt8, CodecKind::kInt4H));
  EXPECT_EQ(*parse_kv_codecs("v=int4h,k=int8"), KvCodecs(CodecKind::kInt8, CodecKind::kInt4H));
  EXPECT_EQ(*parse_kv_codecs("k=fp8"), KvCodecs(CodecKind::kFp8));  // the part not named follows the other
  EXPECT_EQ(*parse_kv_codecs("k=int4,v=int4"), KvCodecs(CodecKind::kInt4));
  for (const KvCodecs c : {KvCodecs(CodecKind::kBf16), KvCodecs(CodecKind::kInt8, CodecKind::kInt4H),
                           KvCodecs(CodecKind::kInt4H, CodecKind::kFp8)})
    EXPECT_EQ(*parse_kv_codecs(c.name()), c) << c.name();
  EXPECT_EQ(KvCodecs(CodecKind::kInt8).name(), "int8");
  EXPECT_EQ(KvCodecs(CodecKind::kInt8, CodecKind::kInt4H).name(), "k=int8,v=int4h");
  EXPECT_EQ(KvCodecs(CodecKind::kInt8, CodecKind::kInt4H).of(KvPart::kV), CodecKind::kInt4H);
  for (const char* bad : {"k=int8,k=fp8", "x=int8", "k=int3", "k=int8,", "k=", "=int8", "", "k=int8;v=int4"}) {
    auto parsed = parse_kv_codecs(bad);
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(parse_kv_codecs("k=int8,k=fp8").status().message().find("twice"), std::string::npos);
}

}  // namespace
}  // namespace hiq
