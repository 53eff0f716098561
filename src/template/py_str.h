// template/py_str.h — Python's str semantics over UTF-8, as chat templates
// observe them through jinja2: lengths and indexes count code points,
// whitespace is Unicode whitespace (str.isspace), and printed floats and
// string reprs are byte-identical to CPython's.
//
// Every function takes well-formed UTF-8 (values come from nlohmann::json,
// which validates, or from a template whose source was validated).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hiq::jinja::py {

// str.isspace() for one code point.
bool is_space(char32_t c);

// The code points of `s`, and the byte offset where each starts (plus one
// entry for the end), for indexing and slicing by code point.
std::vector<char32_t> code_points(std::string_view s);
std::vector<size_t> code_point_offsets(std::string_view s);
size_t code_point_count(std::string_view s);
void append_utf8(std::string& out, char32_t c);

// str.strip/lstrip/rstrip: `chars` absent means whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);

// str.split / str.rsplit. No separator: runs of whitespace, empty ends
// dropped. max_split < 0: no limit. Errors are the caller's (empty sep).
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t max_split);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t max_split);
// str.splitlines() (line ends not kept).
std::vector<std::string> splitlines(std::string_view s);

// str.replace; count < 0 replaces all.
std::string replace(std::string_view s, std::string_view old_text, std::string_view new_text, int64_t count);

// str.upper / lower / title / capitalize (simple Unicode case mapping; the
// few full mappings such as ß → SS are not applied).
std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);
std::string capitalize(std::string_view s);

// repr(str): quotes chosen as CPython does, non-printable code points escaped.
std::string repr(std::string_view s);

// repr(float): the shortest digits that round-trip, in CPython's layout
// (1e+16, 1000000000000000.0, 1e-05, inf, nan).
std::string float_repr(double value);

// json.dumps of a string (the quotes included).
void append_json_string(std::string& out, std::string_view s, bool ensure_ascii);

}  // namespace hiq::jinja::py
