// core/units.h — byte sizes as people write them on command lines and in configs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace hiq {

inline constexpr uint64_t kKB = 1000, kMB = kKB * 1000, kGB = kMB * 1000, kTB = kGB * 1000;
inline constexpr uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024, kTiB = kGiB * 1024;

// Parses "8GB" (decimal, 8e9), "8GiB" (binary, 8·2^30), "0.5GB", "1.25 TiB",
// "4096B" or a plain number, which is taken in `default_unit` bytes (the
// `--hicache-size` flag passes kGB, as SGLang reads that flag in GB). Suffixes are
// case-insensitive; fractions are exact (decimal arithmetic, rounded down to a
// whole byte). Errors: empty text, a bad number, an unknown unit, a negative
// value, or a result above 2^64-1 bytes.
Result<uint64_t> parse_byte_size(std::string_view text, uint64_t default_unit = 1);

// "8.00 GB" / "512.0 MB" / "17 B": decimal units, three significant digits or more.
std::string format_bytes(uint64_t bytes);

// "54,253": an integer with thousands separators, for tables people read.
std::string format_count(uint64_t value);

}  // namespace hiq
