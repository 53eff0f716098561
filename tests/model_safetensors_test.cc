// Tests of model/safetensors.h and model/checkpoint.h: round trips of every
// dtype, every way a header can be malformed or lie, truncated files, sharded
// checkpoints and their index errors, and the fuzzing corpus (so CI replays it
// without libFuzzer).
#include "expect_error.h"
#include "model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "model/checkpoint.h"
#include "safetensors_writer.h"

namespace hiq {
namespace {

namespace fs = std::filesystem;
using testing::make_tensor;
using testing::safetensors_file_bytes;
using testing::TempDir;
using testing::WriterTensor;

using testing::contains;
using testing::expect_error;

std::vector<std::byte> zeros(size_t n) { return std::vector<std::byte>(n); }

// Parses a file made of `header` (raw text) and `data_bytes` zero bytes.
Result<SafetensorsHeader> parse(const std::string& header, size_t data_bytes = 0) {
  const std::vector<std::byte> data = zeros(data_bytes);
  const std::vector<std::byte> file = safetensors_file_bytes(header, data);
  return parse_safetensors_header(file, "t.safetensors");
}

std::vector<std::byte> length_prefix(uint64_t n) {
  std::vector<std::byte> out(8);
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  return out;
}

// ---- well-formed files ------------------------------------------------------------

TEST(SafetensorsHeader, ParsesEveryDtypeInOffsetOrderWithMetadata) {
  const std::vector<WriterTensor> tensors = {
      make_tensor("b.weight", TensorDtype::kF32, {3, 2}, 1),
      make_tensor("a.weight", TensorDtype::kBf16, {4}, 2),
      make_tensor("c.weight", TensorDtype::kF16, {2, 1, 3}, 3),
  };
  const auto file = safetensors_file_bytes(tensors, {{"format", "pt"}});
  const auto h = parse_safetensors_header(file, "t.safetensors");
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  ASSERT_EQ(h->tensors.size(), 3u);
  // Offset order, which is the writer's order, not the names' order.
  EXPECT_EQ(h->tensors[0].name, "b.weight");
  EXPECT_EQ(h->tensors[0].dtype, TensorDtype::kF32);
  EXPECT_EQ(h->tensors[0].shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(h->tensors[0].begin, 0u);
  EXPECT_EQ(h->tensors[0].end, 24u);
  EXPECT_EQ(h->tensors[1].name, "a.weight");
  EXPECT_EQ(h->tensors[1].dtype, TensorDtype::kBf16);
  EXPECT_EQ(h->tensors[1].end - h->tensors[1].begin, 8u);
  EXPECT_EQ(h->tensors[2].name, "c.weight");
  EXPECT_EQ(h->tensors[2].dtype, TensorDtype::kF16);
  EXPECT_EQ(h->tensors[2].end, 24u + 8u + 12u);
  EXPECT_EQ(h->data_bytes, 44u);
  EXPECT_EQ(h->data_offset % 8, 0u);  // the writer pads the header like the reference does
  EXPECT_EQ(h->data_offset + h->data_bytes, file.size());
  EXPECT_EQ(h->metadata.at("format"), "pt");
}

TEST(SafetensorsHeader, AcceptsScalarsEmptyTensorsAndAnEmptyHeader) {
  // A scalar has one element; a zero dimension makes an empty tensor even
  // when the other dimensions are huge.
  const auto h = parse(R"({"s": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]},
                           "e": {"dtype": "BF16", "shape": [4611686018427387904, 0], "data_offsets": [4, 4]}})",
                       4);
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  ASSERT_EQ(h->tensors.size(), 2u);
  EXPECT_TRUE(parse("{}").is_ok());
  EXPECT_TRUE(parse(R"({"__metadata__": {}})").is_ok());
}

TEST(SafetensorsHeader, IgnoresUnknownFieldsOfAnEntry) {
  EXPECT_TRUE(parse(R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "note": [1, {"x": 2}]}})", 4)
                  .is_ok());
}

// ---- malformed or lying headers -----------------------------------------------------

TEST(SafetensorsHeader, RejectsFilesShorterThanTheLength) {
  for (size_t n : {0, 1, 7}) {
    const std::vector<std::byte> file = zeros(n);
    expect_error(parse_safetensors_header(file, "short.safetensors"), StatusCode::kDataLoss,
                 {"short.safetensors", "truncated"});
  }
}

TEST(SafetensorsHeader, RejectsAHeaderLengthBeyondTheFile) {
  std::vector<std::byte> file = length_prefix(100);
  const std::string text = R"({"a": 1})";
  for (char c : text) file.push_back(static_cast<std::byte>(c));
  expect_error(parse_safetensors_header(file, "t.safetensors"), StatusCode::kDataLoss,
               {"t.safetensors", "truncated", "100"});
}

TEST(SafetensorsHeader, RejectsAnAbsurdHeaderLength) {
  for (uint64_t n : {kMaxSafetensorsHeaderBytes + 1, ~uint64_t{0}}) {
    std::vector<std::byte> file = length_prefix(n);
    file.resize(64, std::byte{'{'});
    expect_error(parse_safetensors_header(file, "t.safetensors"), StatusCode::kDataLoss, {"t.safetensors", "exceeds"});
  }
}

TEST(SafetensorsHeader, RejectsHeadersThatAreNotAJsonObject) {
  expect_error(parse("", 0), StatusCode::kDataLoss, {"t.safetensors", "'{'"});
  expect_error(parse("[1, 2]"), StatusCode::kDataLoss, {"t.safetensors", "'{'"});
  expect_error(parse(" {}"), StatusCode::kDataLoss, {"'{'"});
  expect_error(parse(R"({"a": )"), StatusCode::kDataLoss, {"t.safetensors", "not valid JSON"});
  expect_error(parse(R"({"a": 1} x)"), StatusCode::kDataLoss, {"not valid JSON"});
  expect_error(parse("{\"\xff\": 1}"), StatusCode::kDataLoss, {"not valid JSON"});  // not UTF-8
  std::string deep = "{\"a\": " + std::string(100, '[') + std::string(100, ']') + "}";
  expect_error(parse(deep), StatusCode::kDataLoss, {"t.safetensors", "levels deep"});
}

TEST(SafetensorsHeader, RejectsEntriesThatAreNotObjectsOrLackFields) {
  expect_error(parse(R"({"w": 3})"), StatusCode::kDataLoss, {"t.safetensors", "'w'", "object"});
  expect_error(parse(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", 4), StatusCode::kDataLoss,
               {"'w'", "'dtype' is missing"});
  expect_error(parse(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", 4), StatusCode::kDataLoss,
               {"'w'", "'shape' is missing"});
  expect_error(parse(R"({"w": {"dtype": "F32", "shape": [1]}})", 4), StatusCode::kDataLoss,
               {"'w'", "'data_offsets' is missing"});
  expect_error(parse(R"({"w": {"dtype": 7, "shape": [1], "data_offsets": [0, 4]}})", 4), StatusCode::kDataLoss,
               {"'w'", "'dtype' must be a string"});
  expect_error(parse(R"({"w": {"dtype": "F32", "shape": 1, "data_offsets": [0, 4]}})", 4), StatusCode::kDataLoss,
               {"'w'", "'shape' must be an array"});
}

TEST(SafetensorsHeader, RejectsUnsupportedDtypesByName) {
  expect_error(parse(R"({"ids": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", 8),
               StatusCode::kInvalidArgument, {"t.safetensors", "'ids'", "'I64'", "BF16, F16 or F32"});
  expect_error(parse(R"({"x": {"dtype": "bf16", "shape": [1], "data_offsets": [0, 2]}})", 2),
               StatusCode::kInvalidArgument, {"'x'", "'bf16'"});
}

TEST(SafetensorsHeader, RejectsBadDimensions) {
  expect_error(parse(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4), StatusCode::kDataLoss,
               {"'w'", "non-negative", "-1"});
  expect_error(parse(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4),
               StatusCode::kDataLoss, {"'w'", "non-negative"});
  expect_error(parse(R"({"w": {"dtype": "F32", "shape": ["2"], "data_offsets": [0, 8]}})", 8),
               StatusCode::kDataLoss, {"'w'", "non-negative"});
  expect_error(parse(R"({"w": {"dtype": "F32", "shape": [9223372036854775808], "data_offsets": [0, 4]}})", 4),
               StatusCode::kDataLoss, {"'w'", "non-negative"});
}

TEST(SafetensorsHeader, RejectsElementCountsThatOverflow) {
  // 2^32 × 2^32 elements wraps to 0 in 64 bits; 2^62 F32 elements is 2^64 bytes.
  expect_error(parse(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})"),
               StatusCode::kDataLoss, {"'w'", "more bytes than any file"});
  expect_error(parse(R"({"w": {"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 0]}})"),
               StatusCode::kDataLoss, {"'w'", "more bytes than any file"});
}

TEST(SafetensorsHeader, RejectsOffsetsThatDisagreeWithTheShape) {
  expect_error(parse(R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}})", 12),
               StatusCode::kDataLoss, {"'w'", "12 bytes", "needs 16"});
  expect_error(parse(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 8), StatusCode::kDataLoss,
               {"'w'", "begin after they end"});
  expect_error(parse(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4), StatusCode::kDataLoss,
               {"'w'", "[begin, end]"});
  expect_error(parse(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 4), StatusCode::kDataLoss,
               {"'w'", "non-negative"});
  expect_error(parse(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4.0]}})", 4),
               StatusCode::kDataLoss, {"'w'", "non-negative"});
}

TEST(SafetensorsHeader, RejectsAHeaderThatLiesAboutTheDataSection) {
  // The header promises 16 bytes; 8 follow (a truncated file, or a lie).
  expect_error(parse(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8), StatusCode::kDataLoss,
               {"t.safetensors", "'w'", "run past the data section of 8 bytes"});
  expect_error(
      parse(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [18446744073709551611, 18446744073709551615]}})",
            4),
      StatusCode::kDataLoss, {"'w'", "run past the data section"});
}

TEST(SafetensorsHeader, RejectsOverlapsHolesAndTrailingBytes) {
  expect_error(parse(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                         "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                     12),
               StatusCode::kDataLoss, {"t.safetensors", "'a'", "'b'", "overlap"});
  // Two views of the same bytes overlap too.
  expect_error(parse(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                         "b": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}})",
                     8),
               StatusCode::kDataLoss, {"'a'", "'b'", "overlap"});
  expect_error(parse(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                         "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                     12),
               StatusCode::kDataLoss, {"bytes 4 to 8", "belong to no tensor", "'b'"});
  expect_error(parse(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 10), StatusCode::kDataLoss,
               {"6 bytes at the end", "belong to no tensor"});
}

TEST(SafetensorsHeader, RejectsDuplicateNamesAndKeys) {
  expect_error(parse(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                         "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                     8),
               StatusCode::kDataLoss, {"t.safetensors", "tensor 'a' appears twice"});
  expect_error(parse(R"({"a": {"dtype": "F32", "dtype": "BF16", "shape": [1], "data_offsets": [0, 4]}})", 4),
               StatusCode::kDataLoss, {"'dtype' appears twice"});
}

TEST(SafetensorsHeader, RejectsMetadataThatIsNotStrings) {
  expect_error(parse(R"({"__metadata__": [1]})"), StatusCode::kDataLoss, {"'__metadata__'", "object"});
  expect_error(parse(R"({"__metadata__": {"format": 1}})"), StatusCode::kDataLoss, {"'format'", "string"});
}

TEST(SafetensorsHeader, QuotesHostileNamesSafely) {
  const auto r = parse("{\"bad\\nname\\u0000\": 3}");
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(contains(r.status().message(), "'bad\\x0aname\\x00'")) << r.status().message();
  const std::string long_name(5000, 'x');
  const auto r2 = parse("{\"" + long_name + "\": 3}");
  ASSERT_FALSE(r2.is_ok());
  EXPECT_LT(r2.status().message().size(), 400u);
}

// ---- mapped files ----------------------------------------------------------------------

TEST(SafetensorsFile, MapsTensorsWhoseBytesRoundTrip) {
  const TempDir dir;
  const std::vector<WriterTensor> tensors = {
      make_tensor("embed", TensorDtype::kBf16, {5, 3}, 7),
      make_tensor("norm", TensorDtype::kF32, {3}, 8),
      make_tensor("proj", TensorDtype::kF16, {2, 3}, 9),
  };
  const fs::path path = dir.path() / "m.safetensors";
  testing::write_safetensors(path, tensors, {{"format", "pt"}});
  auto opened = SafetensorsFile::open(path.string());
  ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
  // Views survive moving the file object: the mapping stays where it is.
  SafetensorsFile file = std::move(opened).value();
  ASSERT_EQ(file.tensors().size(), 3u);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  for (const WriterTensor& t : tensors) {
    const TensorView* view = file.find(t.name);
    ASSERT_NE(view, nullptr) << t.name;
    EXPECT_EQ(view->name, t.name);
    EXPECT_EQ(tensor_dtype_name(view->dtype), t.dtype);
    EXPECT_EQ(view->shape, t.shape);
    EXPECT_EQ(view->file, path.string());
    ASSERT_EQ(view->bytes, t.data.size());
    EXPECT_EQ(static_cast<size_t>(view->elements()) * tensor_dtype_bytes(view->dtype), view->bytes);
    EXPECT_EQ(std::memcmp(view->data, t.data.data(), view->bytes), 0) << t.name;
  }
  EXPECT_EQ(file.find("absent"), nullptr);
  EXPECT_EQ(file.tensors()[0].name, "embed");  // data-section order
}

TEST(SafetensorsFile, RejectsTruncatedFiles) {
  const TempDir dir;
  const auto bytes = safetensors_file_bytes({make_tensor("w", TensorDtype::kF32, {16, 16}, 1)});
  for (size_t keep : {size_t{0}, size_t{5}, size_t{20}, bytes.size() - 1}) {
    const fs::path path = dir.path() / ("cut" + std::to_string(keep) + ".safetensors");
    testing::write_bytes(path, std::span(bytes).first(keep));
    const auto r = SafetensorsFile::open(path.string());
    expect_error(r, StatusCode::kDataLoss, {path.string()});
  }
}

TEST(SafetensorsFile, ReportsMissingFilesAndDirectories) {
  const TempDir dir;
  expect_error(SafetensorsFile::open((dir.path() / "none.safetensors").string()), StatusCode::kNotFound,
               {"none.safetensors", "no such file"});
  expect_error(SafetensorsFile::open(dir.path().string()), StatusCode::kInvalidArgument, {"not a regular file"});
}

// ---- checkpoints ------------------------------------------------------------------------

std::vector<WriterTensor> some_tensors(int n) {
  std::vector<WriterTensor> out;
  for (int i = 0; i < n; ++i)
    out.push_back(make_tensor("t" + std::to_string(i), i % 2 ? TensorDtype::kF32 : TensorDtype::kBf16, {2, i + 1},
                              static_cast<uint32_t>(i)));
  return out;
}

TEST(Checkpoint, OpensASingleFile) {
  const TempDir dir;
  const auto tensors = some_tensors(4);
  testing::write_checkpoint(dir.path(), "{}", tensors);
  const auto c = Checkpoint::open(dir.path().string());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->tensor_count(), 4u);
  EXPECT_EQ(c->files().size(), 1u);
  EXPECT_EQ(c->names(), (std::vector<std::string>{"t0", "t1", "t2", "t3"}));
  ASSERT_NE(c->find("t2"), nullptr);
  EXPECT_EQ(std::memcmp(c->find("t2")->data, tensors[2].data.data(), tensors[2].data.size()), 0);
  EXPECT_EQ(c->find("t9"), nullptr);
}

TEST(Checkpoint, OpensShardsThroughTheIndex) {
  const TempDir dir;
  const auto tensors = some_tensors(7);
  testing::write_checkpoint(dir.path(), "{}", tensors, /*shards=*/3);
  auto opened = Checkpoint::open(dir.path().string());
  ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
  const Checkpoint c = std::move(opened).value();  // views survive moving the checkpoint
  EXPECT_EQ(c.files().size(), 3u);
  EXPECT_EQ(c.tensor_count(), 7u);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorView* view = c.find(tensors[i].name);
    ASSERT_NE(view, nullptr) << tensors[i].name;
    EXPECT_TRUE(contains(view->file, "model-0000" + std::to_string(i % 3 + 1) + "-of-00003.safetensors"))
        << view->file;
    EXPECT_EQ(std::memcmp(view->data, tensors[i].data.data(), view->bytes), 0);
  }
}

TEST(Checkpoint, PrefersTheSingleFileLikeTransformers) {
  const TempDir dir;
  testing::write_checkpoint(dir.path(), "{}", some_tensors(3), 2);
  testing::write_safetensors(dir.path() / "model.safetensors", some_tensors(1));
  const auto c = Checkpoint::open(dir.path().string());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->tensor_count(), 1u);
}

TEST(Checkpoint, ReportsMissingDirectoriesAndFiles) {
  const TempDir dir;
  expect_error(Checkpoint::open((dir.path() / "nope").string()), StatusCode::kNotFound, {"nope", "no such"});
  expect_error(Checkpoint::open(dir.path().string()), StatusCode::kNotFound,
               {dir.path().string(), "model.safetensors", "model.safetensors.index.json"});
  testing::write_text(dir.path() / "pytorch_model.bin", "x");
  expect_error(Checkpoint::open(dir.path().string()), StatusCode::kNotFound, {"PyTorch"});
  testing::write_text(dir.path() / "file", "x");
  expect_error(Checkpoint::open((dir.path() / "file").string()), StatusCode::kInvalidArgument, {"not a directory"});
}

TEST(Checkpoint, PassesOnErrorsOfItsFiles) {
  const TempDir dir;
  testing::write_bytes(dir.path() / "model.safetensors",
                       safetensors_file_bytes(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                                              zeros(4)));
  expect_error(Checkpoint::open(dir.path().string()), StatusCode::kDataLoss, {"model.safetensors", "'w'"});
}

// A sharded checkpoint of t0..t3 over two shards, with an index written by hand.
void write_two_shards(const fs::path& dir, const std::string& weight_map_json) {
  const auto tensors = some_tensors(4);
  testing::write_safetensors(dir / "a.safetensors", {tensors[0], tensors[1]});
  testing::write_safetensors(dir / "b.safetensors", {tensors[2], tensors[3]});
  testing::write_text(dir / "model.safetensors.index.json", R"({"metadata": {}, "weight_map": )" + weight_map_json + "}");
}

TEST(Checkpoint, HandWrittenIndexOpens) {
  const TempDir dir;
  write_two_shards(dir.path(), R"({"t0": "a.safetensors", "t1": "./a.safetensors", "t2": "b.safetensors",
                                   "t3": "b.safetensors"})");
  const auto c = Checkpoint::open(dir.path().string());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->files().size(), 2u);  // "./a" and "a" are one shard, opened once
  EXPECT_EQ(c->tensor_count(), 4u);
}

TEST(Checkpoint, ServesShardTensorsTheIndexDoesNotList) {
  const TempDir dir;
  write_two_shards(dir.path(), R"({"t0": "a.safetensors", "t2": "b.safetensors"})");
  const auto c = Checkpoint::open(dir.path().string());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->tensor_count(), 4u);
}

TEST(Checkpoint, ReportsAMissingShard) {
  const TempDir dir;
  write_two_shards(dir.path(), R"({"t0": "a.safetensors", "t9": "c.safetensors"})");
  expect_error(Checkpoint::open(dir.path().string()), StatusCode::kNotFound,
               {"model.safetensors.index.json", "'c.safetensors'", "'t9'", "does not exist"});
}

TEST(Checkpoint, ReportsATensorTheShardLacks) {
  const TempDir dir;
  write_two_shards(dir.path(), R"({"t0": "a.safetensors", "t2": "a.safetensors", "t3": "b.safetensors"})");
  expect_error(Checkpoint::open(dir.path().string()), StatusCode::kDataLoss,
               {"model.safetensors.index.json", "'t2'", "'a.safetensors'", "does not hold it"});
}

TEST(Checkpoint, ReportsATensorInTwoShards) {
  const TempDir dir;
  const auto tensors = some_tensors(3);
  testing::write_safetensors(dir.path() / "a.safetensors", {tensors[0], tensors[1]});
  testing::write_safetensors(dir.path() / "b.safetensors", {tensors[1], tensors[2]});
  testing::write_text(dir.path() / "model.safetensors.index.json",
                      R"({"weight_map": {"t0": "a.safetensors", "t1": "a.safetensors", "t2": "b.safetensors"}})");
  expect_error(Checkpoint::open(dir.path().string()), StatusCode::kDataLoss,
               {"'t1'", "two shards", "a.safetensors", "b.safetensors"});
  // Listed twice in the index itself.
  testing::write_text(dir.path() / "model.safetensors.index.json",
                      R"({"weight_map": {"t0": "a.safetensors", "t0": "b.safetensors"}})");
  expect_error(Checkpoint::open(dir.path().string()), StatusCode::kDataLoss,
               {"model.safetensors.index.json", "'t0'", "appears twice"});
}

TEST(Checkpoint, ReportsMalformedIndexes) {
  const TempDir dir;
  const fs::path index = dir.path() / "model.safetensors.index.json";
  testing::write_text(index, "{not json");
  expect_error(Checkpoint::open(dir.path().string()), StatusCode::kDataLoss, {index.string(), "not valid JSON"});
  testing::write_text(index, R"({"metadata": {}})");
  expect_error(Checkpoint::open(dir.path().string()), StatusCode::kDataLoss, {"'weight_map'"});
  testing::write_text(index, R"({"weight_map": {"t0": 3}})");
  expect_error(Checkpoint::open(dir.path().string()), StatusCode::kDataLoss, {"'t0'", "must name a file"});
  for (const char* shard : {"../a.safetensors", "/etc/passwd", "x/../../a.safetensors", ""}) {
    testing::write_text(index, std::string(R"({"weight_map": {"t0": ")") + shard + "\"}}");
    expect_error(Checkpoint::open(dir.path().string()), StatusCode::kDataLoss, {"'t0'", "not a file inside"});
  }
}

// ---- the fuzzing corpus, replayed ----------------------------------------------------------

// Every seed and every input the fuzzer kept must parse without crashing (this
// test runs under ASan and UBSan in CI). Files named ok-* must parse and bad-*
// must be refused; inputs the fuzzer added (named by hash) only must not crash.
TEST(SafetensorsCorpus, EveryFileParsesOrFailsAsItsNameSays) {
  const fs::path corpus = HIQ_SAFETENSORS_CORPUS_DIR;
  ASSERT_TRUE(fs::is_directory(corpus)) << corpus;
  int ok = 0, bad = 0, other = 0;
  for (const auto& entry : fs::directory_iterator(corpus)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto bytes = std::as_bytes(std::span(text.data(), text.size()));
    const std::string name = entry.path().filename().string();
    const auto r = parse_safetensors_header(bytes, name);
    if (name.starts_with("ok-")) {
      EXPECT_TRUE(r.is_ok()) << name << ": " << r.status().to_string();
      ++ok;
    } else if (name.starts_with("bad-")) {
      EXPECT_FALSE(r.is_ok()) << name << " parsed";
      if (!r.is_ok()) {
        EXPECT_TRUE(contains(r.status().message(), name)) << r.status().message();
      }
      ++bad;
    } else {
      ++other;
    }
  }
  EXPECT_GE(ok, 3) << "the seed corpus should hold a valid file of each dtype";
  EXPECT_GE(bad, 10);
  std::cout << "corpus: " << ok << " ok, " << bad << " bad, " << other << " found by the fuzzer\n";
}

}  // namespace
}  // namespace hiq
