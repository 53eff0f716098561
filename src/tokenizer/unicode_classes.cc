#include "tokenizer/unicode_classes.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <array>
#include <cstdio>
#include <utility>
#include <vector>

#include "core/check.h"
#include "tokenizer/utf8.h"

namespace hiq {
namespace {

// utf8proc_category_t by value: 0 is Cn (unassigned), then Lu .. Co.
constexpr std::array<std::string_view, 30> kCategoryNames = {
    "Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
    "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"};
constexpr int kSurrogateCategory = UTF8PROC_CATEGORY_CS;

// White_Space (PropList.txt, unchanged since Unicode 6.3), as class members.
constexpr std::string_view kWhiteSpaceMembers =
    R"(\x{9}-\x{D}\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

using Ranges = std::vector<std::pair<char32_t, char32_t>>;

// For each general category, the code points utf8proc puts in it and PCRE2's
// \p{..} of that category does not match. Built once per process.
struct Catalog {
  std::array<Ranges, kCategoryNames.size()> added;
  size_t added_count = 0;    // code points in `added`, all categories
  size_t changed_count = 0;  // of those, the ones PCRE2 gives another category (not Cn)

  Catalog() {
    std::array<std::string, kCategoryNames.size()> members;  // UTF-8 of every code point, by category
    for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
      const int category = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
      if (category == UTF8PROC_CATEGORY_CN || category == kSurrogateCategory) continue;
      append_utf8(members[static_cast<size_t>(category)], cp);
    }
    const auto unassigned = compile(R"(\p{Cn})");
    pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
    HIQ_CHECK_MSG(data != nullptr, "out of memory for PCRE2 match data");
    for (size_t category = 1; category < members.size(); ++category) {
      const std::string& text = members[category];
      if (text.empty()) continue;
      pcre2_code* outside = compile("\\P{" + std::string(kCategoryNames[category]) + "}");
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
      size_t pos = 0;
      while (pos < text.size() &&
             pcre2_match(outside, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, data, nullptr) >= 0) {
        const size_t start = pcre2_get_ovector_pointer(data)[0];
        const size_t length = utf8_step(text, start).length;
        const char32_t cp = decode_one(text.substr(start, length));
        Ranges& ranges = added[category];
        if (!ranges.empty() && ranges.back().second + 1 == cp) {
          ranges.back().second = cp;
        } else {
          ranges.emplace_back(cp, cp);
        }
        ++added_count;
        if (pcre2_match(unassigned, subject + start, length, 0, PCRE2_NO_UTF_CHECK, data, nullptr) < 0)
          ++changed_count;
        pos = start + length;
      }
      pcre2_code_free(outside);
    }
    pcre2_match_data_free(data);
    pcre2_code_free(unassigned);
  }

  static pcre2_code* compile(const std::string& pattern) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    HIQ_CHECK_MSG(code != nullptr, "PCRE2 cannot compile a general category");
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    return code;
  }

  static char32_t decode_one(std::string_view utf8) {
    const auto lead = static_cast<unsigned char>(utf8[0]);
    if (utf8.size() == 1) return lead;
    char32_t cp = lead & (0x7F >> utf8.size());
    for (size_t i = 1; i < utf8.size(); ++i) cp = (cp << 6) | (static_cast<unsigned char>(utf8[i]) & 0x3F);
    return cp;
  }
};

const Catalog& catalog() {
  static const Catalog kCatalog;
  return kCatalog;
}

// The categories a property name stands for (Oniguruma's short names), or none.
std::vector<size_t> categories_of(std::string_view name) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 8> kGroups = {{
      {"L", "LuLlLtLmLo"}, {"LC", "LuLlLt"}, {"L&", "LuLlLt"}, {"M", "MnMcMe"},
      {"N", "NdNlNo"}, {"P", "PcPdPsPePiPfPo"}, {"S", "SmScSkSo"}, {"Z", "ZsZlZp"},
  }};
  std::string_view members = name;
  for (const auto& [group, list] : kGroups)
    if (name == group) members = list;
  std::vector<size_t> out;
  if (members.size() % 2 != 0) return {};
  for (size_t i = 0; i < members.size(); i += 2) {
    size_t found = 0;
    for (size_t c = 1; c < kCategoryNames.size(); ++c)
      if (kCategoryNames[c] == members.substr(i, 2)) found = c;
    if (found == 0) return {};  // a script or another property: PCRE2's own
    out.push_back(found);
  }
  return out;
}

std::string range_members(const Catalog& cat, const std::vector<size_t>& categories) {
  std::string out;
  char buffer[40];
  for (size_t c : categories) {
    for (const auto& [first, last] : cat.added[c]) {
      if (first == last) {
        std::snprintf(buffer, sizeof buffer, "\\x{%X}", static_cast<unsigned>(first));
      } else {
        std::snprintf(buffer, sizeof buffer, "\\x{%X}-\\x{%X}", static_cast<unsigned>(first),
                      static_cast<unsigned>(last));
      }
      out += buffer;
    }
  }
  return out;
}

Status refuse_in_class(std::string_view field, size_t offset, std::string_view what) {
  return invalid_argument("field '" + std::string(field) + "' uses " + std::string(what) +
                          " inside a character class at offset " + std::to_string(offset) +
                          "; PCRE2 would read it with other Unicode tables than Oniguruma, and a class "
                          "cannot hold the correction");
}

}  // namespace

Result<std::string> rewrite_unicode_classes(std::string_view p, std::string_view field) {
  std::string out;
  out.reserve(p.size());
  bool in_class = false;
  size_t class_first = 0;  // where a class's members start (a ']' there is a member)
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      if (e == 's' || e == 'S') {
        if (!in_class) {
          out += e == 's' ? "[" : "[^";
          out += kWhiteSpaceMembers;
          out += ']';
        } else if (e == 's') {
          out += kWhiteSpaceMembers;
        } else {
          return refuse_in_class(field, i, "\\S");
        }
        ++i;
        continue;
      }
      if ((e == 'p' || e == 'P') && i + 2 < p.size()) {
        // \pL, \p{L}, \p{^L}, \P{L}.
        size_t end = i + 2;  // last byte of the escape
        std::string_view name = p.substr(i + 2, 1);
        if (p[i + 2] == '{') {
          end = p.find('}', i + 3);
          if (end == std::string_view::npos) end = i + 2;  // PCRE2 reports it
          name = p.substr(i + 3, end - (i + 3));
        }
        bool negated = e == 'P';
        if (name.starts_with('^')) {
          negated = !negated;
          name.remove_prefix(1);
        }
        const bool unterminated = end == i + 2 && p[i + 2] == '{';
        const std::vector<size_t> categories = unterminated ? std::vector<size_t>() : categories_of(name);
        const std::string added = categories.empty() ? std::string() : range_members(catalog(), categories);
        if (added.empty()) {
          out.append(p.substr(i, end + 1 - i));
        } else if (!in_class) {
          out += negated ? "[^\\p{" : "[\\p{";
          out.append(name);
          out += '}';
          out += added;
          out += ']';
        } else if (!negated) {
          out.append(p.substr(i, end + 1 - i));
          out += added;
        } else {
          return refuse_in_class(field, i, "a negated property (\\P{" + std::string(name) + "})");
        }
        i = end;
        continue;
      }
      out += c;
      out += e;
      ++i;
      continue;
    }
    out += c;
    if (in_class) {
      if (c == ']' && i != class_first) {
        in_class = false;
      } else if (c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // a POSIX class such as [:alpha:]
        const size_t close = p.find(":]", i + 2);
        if (close != std::string_view::npos) {
          out.append(p.substr(i + 1, close + 1 - i));
          i = close + 1;
        }
      }
    } else if (c == '[') {
      in_class = true;
      class_first = i + 1 < p.size() && p[i + 1] == '^' ? i + 2 : i + 1;
    }
  }
  return out;
}

size_t unicode_classes_added_code_points() { return catalog().added_count; }

size_t unicode_classes_changed_code_points() { return catalog().changed_count; }

}  // namespace hiq
