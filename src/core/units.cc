#include "core/units.h"

#include <array>
#include <cctype>
#include <cstdio>
#include <limits>

namespace hiq {
namespace {

__extension__ typedef unsigned __int128 u128;  // exact products of a 64-bit count and a unit

struct UnitName {
  std::string_view name;
  uint64_t bytes;
};

constexpr std::array<UnitName, 13> kUnits{{
    {"b", 1},
    {"kb", kKB}, {"mb", kMB}, {"gb", kGB}, {"tb", kTB},
    {"kib", kKiB}, {"mib", kMiB}, {"gib", kGiB}, {"tib", kTiB},
    {"k", kKB}, {"m", kMB}, {"g", kGB}, {"t", kTB},
}};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

Result<uint64_t> parse_byte_size(std::string_view text, uint64_t default_unit) {
  std::string quoted(1, '\'');
  quoted.append(text);
  quoted.push_back('\'');
  std::string_view s = trim(text);
  if (s.empty()) return invalid_argument("empty byte size (expected e.g. 8GB, 8GiB, 0.5GB)");
  if (s.front() == '-') return invalid_argument("byte size " + quoted + " is negative");

  size_t i = 0;
  std::string_view int_digits, frac_digits;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  int_digits = s.substr(0, i);
  if (i < s.size() && s[i] == '.') {
    const size_t start = ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    frac_digits = s.substr(start, i - start);
  }
  if (int_digits.empty() && frac_digits.empty())
    return invalid_argument("byte size " + quoted + " does not start with a number");

  uint64_t unit = default_unit;
  const std::string suffix = lower(trim(s.substr(i)));
  if (!suffix.empty()) {
    unit = 0;
    for (const UnitName& u : kUnits)
      if (suffix == u.name) unit = u.bytes;
    if (unit == 0)
      return invalid_argument("byte size " + quoted + " has an unknown unit '" + suffix +
                              "' (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)");
  }

  // value = (int_digits + frac_digits / 10^k) * unit, exactly, rounded down.
  constexpr u128 kMax = std::numeric_limits<uint64_t>::max();
  const auto too_large = [&] { return out_of_range("byte size " + quoted + " exceeds 2^64-1 bytes"); };
  u128 whole = 0;
  for (char c : int_digits) {
    whole = whole * 10 + static_cast<u128>(c - '0');
    if (whole > kMax) return too_large();
  }
  u128 total = whole * unit;
  if (total > kMax) return too_large();
  if (frac_digits.size() > 30) frac_digits = frac_digits.substr(0, 30);  // beyond any unit's precision
  u128 frac = 0, denom = 1;
  for (char c : frac_digits) {
    if (denom > kMax) break;  // further digits are below one byte for every unit we know
    frac = frac * 10 + static_cast<u128>(c - '0');
    denom *= 10;
  }
  total += frac * unit / denom;
  if (total > kMax) return too_large();
  return static_cast<uint64_t>(total);
}

std::string format_bytes(uint64_t bytes) {
  static constexpr std::array<std::string_view, 5> kNames{"B", "KB", "MB", "GB", "TB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (v >= 1000.0 && u + 1 < kNames.size()) {
    v /= 1000.0;
    ++u;
  }
  char buf[48];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s", v,
                  kNames[u].data());
  return buf;
}

std::string format_count(uint64_t value) {
  std::string digits = std::to_string(value);
  std::string out;
  const size_t n = digits.size();
  for (size_t i = 0; i < n; ++i) {
    if (i > 0 && (n - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace hiq
