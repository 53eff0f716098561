// Tests of core/units.h: byte sizes as people write them, and numbers as they read them.
#include "core/units.h"

#include <cstdint>
#include <limits>
#include <string>

#include <gtest/gtest.h>

namespace hiq {
namespace {

// Parses `text` and expects success; returns the value (0 after a failed expectation).
uint64_t parse_ok(const std::string& text, uint64_t default_unit = 1) {
  const Result<uint64_t> r = parse_byte_size(text, default_unit);
  EXPECT_TRUE(r.is_ok()) << "'" << text << "': " << r.status().to_string();
  return r.is_ok() ? *r : 0;
}

// Parses `text` and expects an error of `code`; returns its message.
std::string parse_error(const std::string& text, StatusCode code, uint64_t default_unit = 1) {
  const Result<uint64_t> r = parse_byte_size(text, default_unit);
  EXPECT_FALSE(r.is_ok()) << "'" << text << "' parsed as " << (r.is_ok() ? *r : 0);
  if (r.is_ok()) return "";
  EXPECT_EQ(r.status().code(), code) << "'" << text << "': " << r.status().to_string();
  return r.status().message();
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(ParseByteSize, Constants) {
  EXPECT_EQ(kGB, 1'000'000'000u);
  EXPECT_EQ(kGiB, uint64_t{1} << 30);
  EXPECT_EQ(kTiB, uint64_t{1} << 40);
}

TEST(ParseByteSize, DecimalAndBinaryUnits) {
  EXPECT_EQ(parse_ok("8GB"), 8'000'000'000u);
  EXPECT_EQ(parse_ok("8GiB"), 8 * (uint64_t{1} << 30));
  EXPECT_EQ(parse_ok("4096B"), 4096u);
  EXPECT_EQ(parse_ok("1KB"), 1000u);
  EXPECT_EQ(parse_ok("1KiB"), 1024u);
  EXPECT_EQ(parse_ok("3MB"), 3'000'000u);
  EXPECT_EQ(parse_ok("3MiB"), 3u << 20);
  EXPECT_EQ(parse_ok("2TB"), 2'000'000'000'000u);
  EXPECT_EQ(parse_ok("2TiB"), uint64_t{2} << 40);
  EXPECT_EQ(parse_ok("8G"), 8'000'000'000u);  // short decimal suffix
}

TEST(ParseByteSize, FractionsAreExact) {
  EXPECT_EQ(parse_ok("0.5GB"), 500'000'000u);
  EXPECT_EQ(parse_ok("1.5GiB"), 3 * (uint64_t{1} << 29));  // 1610612736
  EXPECT_EQ(parse_ok("1.5GiB"), 1'610'612'736u);
  // 8.1 is not exact in binary floating point; the parser must not go through double.
  EXPECT_EQ(parse_ok("8.1GB"), 8'100'000'000u);
  EXPECT_EQ(parse_ok("1.25TiB"), 5 * (uint64_t{1} << 38));
  EXPECT_EQ(parse_ok(".5KB"), 500u);
  EXPECT_EQ(parse_ok("2.KB"), 2000u);
}

TEST(ParseByteSize, FractionsRoundDown) {
  EXPECT_EQ(parse_ok("0.0000000001GB"), 0u);  // 0.1 byte
  EXPECT_EQ(parse_ok("1.9B"), 1u);
  EXPECT_EQ(parse_ok("0.0009KB"), 0u);
  EXPECT_EQ(parse_ok("0.0015KiB"), 1u);  // 1.536 bytes
}

TEST(ParseByteSize, SpacesAreTrimmed) {
  EXPECT_EQ(parse_ok(" 2 GB "), 2'000'000'000u);
  EXPECT_EQ(parse_ok("\t8GiB\n"), 8 * (uint64_t{1} << 30));
  EXPECT_EQ(parse_ok("1.25 TiB"), 5 * (uint64_t{1} << 38));
}

TEST(ParseByteSize, SuffixesAreCaseInsensitive) {
  EXPECT_EQ(parse_ok("8gb"), 8'000'000'000u);
  EXPECT_EQ(parse_ok("8gib"), 8 * (uint64_t{1} << 30));
  EXPECT_EQ(parse_ok("8GIB"), 8 * (uint64_t{1} << 30));
  EXPECT_EQ(parse_ok("8Gb"), 8'000'000'000u);
  EXPECT_EQ(parse_ok("4096b"), 4096u);
}

TEST(ParseByteSize, PlainNumberUsesDefaultUnit) {
  EXPECT_EQ(parse_ok("8", kGB), 8'000'000'000u);
  EXPECT_EQ(parse_ok("0.5", kGB), 500'000'000u);
  EXPECT_EQ(parse_ok("4096", 1), 4096u);
  EXPECT_EQ(parse_ok("4096"), 4096u);  // the default default_unit is bytes
  EXPECT_EQ(parse_ok("2", kGiB), uint64_t{2} << 30);
  // An explicit unit overrides the default.
  EXPECT_EQ(parse_ok("4096B", kGB), 4096u);
  EXPECT_EQ(parse_ok("8GiB", kGB), 8 * (uint64_t{1} << 30));
}

TEST(ParseByteSize, Zero) {
  EXPECT_EQ(parse_ok("0"), 0u);
  EXPECT_EQ(parse_ok("0GB"), 0u);
  EXPECT_EQ(parse_ok("0.0GiB"), 0u);
}

TEST(ParseByteSize, Limits) {
  EXPECT_EQ(parse_ok("18446744073709551615B"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(parse_ok("18446744073709551615"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(parse_ok("16777215TiB"), uint64_t{16777215} << 40);  // just below 2^64
}

TEST(ParseByteSize, EmptyIsAnError) {
  EXPECT_TRUE(contains(parse_error("", StatusCode::kInvalidArgument), "empty"));
  EXPECT_TRUE(contains(parse_error("   ", StatusCode::kInvalidArgument), "empty"));
}

TEST(ParseByteSize, NegativeIsAnError) {
  const std::string msg = parse_error("-1GB", StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(msg, "negative")) << msg;
  EXPECT_TRUE(contains(msg, "-1GB")) << msg;
  EXPECT_TRUE(contains(parse_error(" -0.5", StatusCode::kInvalidArgument, kGB), "negative"));
}

TEST(ParseByteSize, MissingNumberIsAnError) {
  const std::string msg = parse_error("GB", StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(msg, "number")) << msg;
  EXPECT_TRUE(contains(msg, "'GB'")) << msg;
  EXPECT_TRUE(contains(parse_error(".GB", StatusCode::kInvalidArgument), "number"));
  EXPECT_TRUE(contains(parse_error("+8GB", StatusCode::kInvalidArgument), "number"));
}

TEST(ParseByteSize, UnknownUnitIsAnError) {
  const std::string msg = parse_error("8XB", StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(msg, "unknown unit")) << msg;
  EXPECT_TRUE(contains(msg, "'xb'")) << msg;  // the unit, as read (lower-cased)
  EXPECT_TRUE(contains(msg, "8XB")) << msg;   // and the whole text
  EXPECT_TRUE(contains(parse_error("8 bytes", StatusCode::kInvalidArgument), "unknown unit"));
  EXPECT_TRUE(contains(parse_error("8GB5", StatusCode::kInvalidArgument), "unknown unit"));
  EXPECT_TRUE(contains(parse_error("1.2.3GB", StatusCode::kInvalidArgument), "unknown unit"));
  EXPECT_TRUE(contains(parse_error("1e9", StatusCode::kInvalidArgument), "unknown unit"));
}

TEST(ParseByteSize, TooLargeIsOutOfRange) {
  std::string msg = parse_error("99999999999999999999", StatusCode::kOutOfRange);
  EXPECT_TRUE(contains(msg, "2^64-1")) << msg;
  msg = parse_error("18446744073709551616B", StatusCode::kOutOfRange);
  EXPECT_TRUE(contains(msg, "18446744073709551616B")) << msg;
  parse_error("20000000000GB", StatusCode::kOutOfRange);  // 2e19 > 2^64-1 ≈ 1.8e19
  parse_error("16777216TiB", StatusCode::kOutOfRange);    // exactly 2^64
  parse_error("18446744073709551615.9999KB", StatusCode::kOutOfRange);
  parse_error("18446744073.709551616GB", StatusCode::kOutOfRange);  // 2^64 through the fraction
  parse_error("20", StatusCode::kOutOfRange, kGB * kGB);  // default unit overflows too
}

TEST(FormatCount, ThousandsSeparators) {
  EXPECT_EQ(format_count(0), "0");
  EXPECT_EQ(format_count(7), "7");
  EXPECT_EQ(format_count(999), "999");
  EXPECT_EQ(format_count(1000), "1,000");
  EXPECT_EQ(format_count(54253), "54,253");
  EXPECT_EQ(format_count(147456), "147,456");
  EXPECT_EQ(format_count(1000000), "1,000,000");
  EXPECT_EQ(format_count(8000000000), "8,000,000,000");
  EXPECT_EQ(format_count(std::numeric_limits<uint64_t>::max()), "18,446,744,073,709,551,615");
}

TEST(FormatBytes, DecimalUnits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(17), "17 B");
  EXPECT_EQ(format_bytes(999), "999 B");
  EXPECT_EQ(format_bytes(1000), "1.00 KB");
  EXPECT_EQ(format_bytes(512'000'000), "512 MB");
  EXPECT_EQ(format_bytes(51'200'000), "51.2 MB");
  EXPECT_EQ(format_bytes(8'000'000'000), "8.00 GB");
  EXPECT_EQ(format_bytes(2'500'000'000'000), "2.50 TB");
  EXPECT_EQ(format_bytes(2'500'000'000'000'000), "2500 TB");  // TB is the largest unit
}

}  // namespace
}  // namespace hiq
