// tools/hiq/table.h — plain-text tables for people; machines get --json.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

namespace hiq::cli {

// "3.14" for (3.14159, 2).
inline std::string format_fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

// Decimal GB per second of `bytes` moved in `seconds` (0 when no time passed).
inline double gbps(uint64_t bytes, double seconds) { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0; }
// How many times faster than `reference_s` a run of `s` seconds is (0 when no time passed).
inline double ratio(double reference_s, double s) { return s > 0 ? reference_s / s : 0; }

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add_row(std::vector<std::string> row) { rows_.push_back(std::move(row)); }

  // The first column is left-aligned, the others (numbers) right-aligned.
  void print(std::ostream& out) const {
    std::vector<size_t> width(header_.size(), 0);
    const auto measure = [&](const std::vector<std::string>& row) {
      for (size_t i = 0; i < row.size() && i < width.size(); ++i) width[i] = std::max(width[i], display_width(row[i]));
    };
    measure(header_);
    for (const auto& r : rows_) measure(r);
    const auto line = [&](const std::vector<std::string>& row) {
      for (size_t i = 0; i < width.size(); ++i) {
        const std::string& cell = i < row.size() ? row[i] : std::string();
        const std::string pad(width[i] - display_width(cell), ' ');
        out << (i ? "  " : "") << (i == 0 ? cell + pad : pad + cell);
      }
      out << '\n';
    };
    line(header_);
    size_t total = 0;
    for (size_t w : width) total += w;
    out << std::string(total + 2 * (width.size() - 1), '-') << '\n';
    for (const auto& r : rows_) line(r);
  }

 private:
  // Counts code points, so "×" and "−" take one column.
  static size_t display_width(const std::string& s) {
    return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
  }

  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace hiq::cli
