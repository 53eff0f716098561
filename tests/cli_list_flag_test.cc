// Tests of tools/hiq/list_flag.h: the one rule every comma-list flag of hiq
// follows (trimmed items, no empty item, no repeat unless the list is a sequence).
#include "expect_error.h"
#include "tools/hiq/list_flag.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace hiq::cli {
namespace {

using testing::expect_error;
using Strings = std::vector<std::string>;

TEST(ListFlag, SplitsOnCommasInOrder) {
  EXPECT_EQ(*parse_list_flag("int8", "--x"), Strings({"int8"}));
  EXPECT_EQ(*parse_list_flag("int8,int4h,bf16", "--x"), Strings({"int8", "int4h", "bf16"}));
}

TEST(ListFlag, TrimsSpacesAndTabsAroundItems) {
  EXPECT_EQ(*parse_list_flag(" int8 ,\tint4h", "--x"), Strings({"int8", "int4h"}));
  EXPECT_EQ(*parse_list_flag("a b, c", "--x"), Strings({"a b", "c"}));  // inner spaces are kept
}

TEST(ListFlag, AnEmptyItemIsAnErrorNamingTheFlag) {
  for (const char* text : {"", ",", "int8,", ",int8", "int8,,int4h", "int8, ,int4h", "  "})
    expect_error(parse_list_flag(text, "--hicache-codec"), StatusCode::kInvalidArgument,
                 {"--hicache-codec", "empty entry"});
}

TEST(ListFlag, ARepeatIsAnErrorUnlessTheListIsASequence) {
  expect_error(parse_list_flag("int8,int4h,int8", "--hicache-codec"), StatusCode::kInvalidArgument,
               {"--hicache-codec", "'int8'", "twice"});
  expect_error(parse_list_flag("int8, int8", "--x"), StatusCode::kInvalidArgument, {"twice"});  // after trimming
  EXPECT_EQ(*parse_list_flag("1,1,2", "--prompt-ids", ListRepeats::kAllow), Strings({"1", "1", "2"}));
}

TEST(ListFlag, IntegersAreDigitsInRange) {
  EXPECT_EQ(*parse_integer_list_flag("1, 32,512", "--batches", 1, 1 << 24), (std::vector<int64_t>{1, 32, 512}));
  for (const char* text : {"0", "16777217", "-1", "+1", "1e3", "0x10", "x", "1.5", "99999999999999999999"})
    expect_error(parse_integer_list_flag(text, "--batches", 1, 1 << 24), StatusCode::kInvalidArgument,
                 {"--batches", "from 1 to 16777216"});
  // Repeats compare values, not spellings.
  expect_error(parse_integer_list_flag("1,01", "--batches", 1, 100), StatusCode::kInvalidArgument,
               {"--batches", "twice", "'1'"});
  EXPECT_EQ(*parse_integer_list_flag("7,7", "--prompt-ids", 0, 100, ListRepeats::kAllow),
            (std::vector<int64_t>{7, 7}));
}

TEST(ListFlag, Codecs) {
  EXPECT_EQ(*parse_codec_list_flag("int8, int4h", "--hicache-codec"),
            (std::vector<CodecKind>{CodecKind::kInt8, CodecKind::kInt4H}));
  EXPECT_EQ(parse_codec_list_flag("all", "--hicache-codec")->size(), std::size(kAllCodecs));
  expect_error(parse_codec_list_flag("int8,int3", "--hicache-codec"), StatusCode::kInvalidArgument,
               {"--hicache-codec", "int3"});
  expect_error(parse_codec_list_flag("int8,int8", "--hicache-codec"), StatusCode::kInvalidArgument, {"twice"});
  expect_error(parse_codec_list_flag("int8,", "--hicache-codec"), StatusCode::kInvalidArgument, {"empty entry"});
}

TEST(ListFlag, KvCodecsPairAKeyAndAValueEntry) {
  const KvCodecs split(CodecKind::kInt8, CodecKind::kInt4H);
  // A ladder's rungs are one item; commands of single codecs say so.
  EXPECT_EQ(join_kv_codec_items({"bf16", "tiered:int8", "int4h", "int8", "tiered:bf16", "int8", "int4h/128", "int4"}),
            (std::vector<std::string>{"bf16", "tiered:int8,int4h", "int8", "tiered:bf16,int8,int4h/128", "int4"}));
  // A suffix ends the ladder: "@cpu" (bench serve --compare's demotion device) as "/128" does.
  EXPECT_EQ(join_kv_codec_items({"tiered:int8", "int4h@cpu", "int4", "tiered:int8", "int4h/64@gpu", "int4h"}),
            (std::vector<std::string>{"tiered:int8,int4h@cpu", "int4", "tiered:int8,int4h/64@gpu", "int4h"}));
  EXPECT_EQ(parse_kv_codec_list_flag("int8,tiered:int8,int4h", "--hicache-codec").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(*parse_kv_codec_list_flag("bf16,k=int8,v=int4h,int4h", "--hicache-codec"),
            (std::vector<KvCodecs>{CodecKind::kBf16, split, CodecKind::kInt4H}));
  EXPECT_EQ(*parse_kv_codec_list_flag("v=int4h, k=int8", "--hicache-codec"), (std::vector<KvCodecs>{split}));
  EXPECT_EQ(*parse_kv_codec_list_flag("k=int8,k=fp8", "--hicache-codec"),  // two entries, each for both parts
            (std::vector<KvCodecs>{CodecKind::kInt8, CodecKind::kFp8}));
  EXPECT_EQ(parse_kv_codec_list_flag("all", "--hicache-codec")->size(), std::size(kAllCodecs));
  expect_error(parse_kv_codec_list_flag("k=int8,v=int4h,v=int4h,k=int8", "--hicache-codec"),
               StatusCode::kInvalidArgument, {"twice", "k=int8,v=int4h"});
  expect_error(parse_kv_codec_list_flag("int8,int8", "--hicache-codec"), StatusCode::kInvalidArgument, {"twice"});
  expect_error(parse_kv_codec_list_flag("k=int3,v=int8", "--hicache-codec"), StatusCode::kInvalidArgument,
               {"--hicache-codec", "int3"});
}

}  // namespace
}  // namespace hiq::cli
