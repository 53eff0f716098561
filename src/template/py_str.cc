#include "template/py_str.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include <utf8proc.h>

namespace hiq::jinja::py {
namespace {

// Decodes the code point at s[i] (well-formed UTF-8) and advances i.
char32_t next_code_point(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  int extra = b0 < 0x80 ? 0 : b0 < 0xE0 ? 1 : b0 < 0xF0 ? 2 : 3;
  char32_t c = extra == 0 ? b0 : extra == 1 ? (b0 & 0x1F) : extra == 2 ? (b0 & 0x0F) : (b0 & 0x07);
  ++i;
  for (; extra > 0 && i < s.size(); --extra, ++i) c = (c << 6) | (static_cast<unsigned char>(s[i]) & 0x3F);
  return c;
}

template <typename Map>
std::string map_code_points(std::string_view s, Map map) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) append_utf8(out, map(next_code_point(s, i)));
  return out;
}

char32_t to_upper(char32_t c) { return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))); }
char32_t to_lower(char32_t c) { return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))); }
char32_t to_title(char32_t c) { return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c))); }

bool is_cased(char32_t c) {
  const utf8proc_category_t cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

bool is_printable(char32_t c) {
  if (c == ' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS: case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

bool in_chars(char32_t c, const std::vector<char32_t>& chars) {
  for (char32_t x : chars) if (x == c) return true;
  return false;
}

}  // namespace

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::vector<char32_t> code_points(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) out.push_back(next_code_point(s, i));
  return out;
}

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> out;
  out.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) out.push_back(i);
  out.push_back(s.size());
  return out;
}

size_t code_point_count(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::vector<char32_t> set = chars ? code_points(*chars) : std::vector<char32_t>{};
  auto strippable = [&](char32_t c) { return chars ? in_chars(c, set) : is_space(c); };
  const std::vector<size_t> offsets = code_point_offsets(s);
  size_t first = 0, last = offsets.size() - 1;  // code point range [first, last)
  auto at = [&](size_t k) {
    size_t i = offsets[k];
    return next_code_point(s, i);
  };
  if (left)
    while (first < last && strippable(at(first))) ++first;
  if (right)
    while (last > first && strippable(at(last - 1))) --last;
  return std::string(s.substr(offsets[first], offsets[last] - offsets[first]));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t max_split) {
  std::vector<std::string> out;
  if (sep) {
    size_t start = 0;
    while (max_split < 0 || static_cast<int64_t>(out.size()) < max_split) {
      const size_t hit = s.find(*sep, start);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(start, hit - start));
      start = hit + sep->size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  size_t i = 0;
  while (true) {
    // Skip whitespace, then take a word.
    size_t word = i;
    while (word < s.size()) {
      size_t next = word;
      if (!is_space(next_code_point(s, next))) break;
      word = next;
    }
    if (word >= s.size()) break;
    if (max_split >= 0 && static_cast<int64_t>(out.size()) == max_split) {
      out.emplace_back(strip(s.substr(word), std::nullopt, false, true));
      break;
    }
    size_t end = word;
    while (end < s.size()) {
      size_t next = end;
      if (is_space(next_code_point(s, next))) break;
      end = next;
    }
    out.emplace_back(s.substr(word, end - word));
    i = end;
  }
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t max_split) {
  if (max_split < 0) return split(s, sep, max_split);
  std::vector<std::string> out;
  if (sep) {
    size_t end = s.size();
    while (static_cast<int64_t>(out.size()) < max_split) {
      if (end < sep->size()) break;
      const size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    const std::vector<size_t> offsets = code_point_offsets(s);
    auto space_at = [&](size_t k) {
      size_t i = offsets[k];
      return is_space(next_code_point(s, i));
    };
    size_t k = offsets.size() - 1;  // code point index of the current end
    while (true) {
      while (k > 0 && space_at(k - 1)) --k;
      if (k == 0) break;
      if (static_cast<int64_t>(out.size()) == max_split) {
        out.push_back(strip(s.substr(0, offsets[k]), std::nullopt, true, false));
        break;
      }
      size_t b = k;
      while (b > 0 && !space_at(b - 1)) --b;
      out.emplace_back(s.substr(offsets[b], offsets[k] - offsets[b]));
      k = b;
    }
  }
  return {out.rbegin(), out.rend()};
}

std::vector<std::string> splitlines(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0, i = 0;
  while (i < s.size()) {
    const size_t at = i;
    const char32_t c = next_code_point(s, i);
    const bool line_break = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) ||
                            c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!line_break) continue;
    out.emplace_back(s.substr(start, at - start));
    if (c == '\r' && i < s.size() && s[i] == '\n') ++i;
    start = i;
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}

std::string replace(std::string_view s, std::string_view old_text, std::string_view new_text, int64_t count) {
  std::string out;
  if (old_text.empty()) {
    // Python inserts new_text before every code point and at the end.
    const std::vector<size_t> offsets = code_point_offsets(s);
    for (size_t k = 0; k + 1 < offsets.size(); ++k) {
      if (count < 0 || static_cast<int64_t>(k) < count) out += new_text;
      out += s.substr(offsets[k], offsets[k + 1] - offsets[k]);
    }
    if (count < 0 || static_cast<int64_t>(offsets.size() - 1) < count) out += new_text;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(old_text, start);
    if (hit == std::string_view::npos) break;
    out += s.substr(start, hit - start);
    out += new_text;
    start = hit + old_text.size();
    ++done;
  }
  out += s.substr(start);
  return out;
}

std::string upper(std::string_view s) { return map_code_points(s, to_upper); }
std::string lower(std::string_view s) { return map_code_points(s, to_lower); }

std::string title(std::string_view s) {
  bool previous_cased = false;
  return map_code_points(s, [&](char32_t c) {
    const char32_t mapped = previous_cased ? to_lower(c) : to_title(c);
    previous_cased = is_cased(c);
    return mapped;
  });
}

std::string capitalize(std::string_view s) {
  bool first = true;
  return map_code_points(s, [&](char32_t c) {
    const char32_t mapped = first ? to_title(c) : to_lower(c);
    first = false;
    return mapped;
  });
}

std::string repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    const char32_t c = next_code_point(s, i);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F || !is_printable(c)) {
      char buf[16];
      if (c < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      else if (c < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      else std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += s.substr(start, i - start);
    }
  }
  out += quote;
  return out;
}

std::string float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  (void)ec;  // 64 bytes always suffice for a double
  std::string_view text(buf, static_cast<size_t>(end - buf));
  std::string out;
  if (text.front() == '-') {
    out += '-';
    text.remove_prefix(1);
  }
  const size_t e = text.find('e');
  std::string digits(text.substr(0, e));
  if (digits.size() > 1) digits.erase(1, 1);  // the '.'
  int exponent = 0;
  std::from_chars(text.data() + e + (text[e + 1] == '+' ? 2 : 1), text.data() + text.size(), exponent);
  const int decpt = exponent + 1;  // value = 0.digits × 10^decpt
  const int n = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (n > 1) {
      out += '.';
      out += digits.substr(1);
    }
    std::snprintf(buf, sizeof buf, "e%c%02d", exponent < 0 ? '-' : '+', exponent < 0 ? -exponent : exponent);
    out += buf;
  } else if (decpt <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decpt), '0');
    out += digits;
  } else if (decpt >= n) {
    out += digits;
    out.append(static_cast<size_t>(decpt - n), '0');
    out += ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(decpt));
    out += '.';
    out += digits.substr(static_cast<size_t>(decpt));
  }
  return out;
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    const char32_t c = next_code_point(s, i);
    char buf[16];
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
          if (c >= 0x10000) {
            const char32_t v = c - 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 | (v >> 10)),
                          static_cast<unsigned>(0xDC00 | (v & 0x3FF)));
          } else {
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          }
          out += buf;
        } else {
          out += s.substr(start, i - start);
        }
    }
  }
  out += '"';
}

}  // namespace hiq::jinja::py
