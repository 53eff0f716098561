#include "template/lexer.h"

#include <charconv>
#include <cstdlib>

#include "template/py_str.h"
#include "template/value.h"

namespace hiq::jinja {
namespace {

[[noreturn]] void fail(int line, const std::string& message) {
  throw TemplateError("chat template line " + std::to_string(line) + ": " + message);
}

// Checks that `s` is well-formed UTF-8 (the string helpers rely on it).
void check_utf8(std::string_view s) {
  int line = 1;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b == '\n') ++line;
    size_t n = b < 0x80 ? 1 : (b >= 0xC2 && b < 0xE0) ? 2 : (b >= 0xE0 && b < 0xF0) ? 3 : (b >= 0xF0 && b < 0xF5) ? 4 : 0;
    if (n == 0 || i + n > s.size()) fail(line, "the template is not valid UTF-8");
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) fail(line, "the template is not valid UTF-8");
    if (n == 3) {
      const auto b1 = static_cast<unsigned char>(s[i + 1]);
      if ((b == 0xE0 && b1 < 0xA0) || (b == 0xED && b1 >= 0xA0)) fail(line, "the template is not valid UTF-8");
    } else if (n == 4) {
      const auto b1 = static_cast<unsigned char>(s[i + 1]);
      if ((b == 0xF0 && b1 < 0x90) || (b == 0xF4 && b1 >= 0x90)) fail(line, "the template is not valid UTF-8");
    }
    i += n;
  }
}

std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// The byte length of the Python-whitespace code point at s[i], or 0.
size_t space_at(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  const std::vector<char32_t> cps = py::code_points(s.substr(i, std::min<size_t>(4, s.size() - i)));
  if (cps.empty() || !py::is_space(cps[0])) return 0;
  const auto b = static_cast<unsigned char>(s[i]);
  return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      const size_t tag = find_tag(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      if (tag == src_.size()) {
        emit_text(std::move(text));
        advance_to(tag);
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign == '-') {
        text = py::strip(text, std::nullopt, false, true);
      } else if (sign != '+' && kind != '{') {
        const size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        // lstrip_blocks: only whitespace (Python's \s, Unicode) between the line's start and the tag.
        if ((line_start > 0 || line_starting) && py::strip(text.substr(line_start), std::nullopt, true, true).empty())
          text.resize(line_start);
      }
      emit_text(std::move(text));
      advance_to(tag);
      const size_t body = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        line_starting = comment(body);
      } else {
        line_starting = tag_tokens(kind, body);
      }
    }
    tokens_.push_back(Token{Token::Type::kEnd, "", line_, 0, 0});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return src_.size();
  }

  void advance_to(size_t p) {
    for (; pos_ < p; ++pos_)
      if (src_[pos_] == '\n') ++line_;
  }

  void emit_text(std::string text) {
    if (!text.empty()) tokens_.push_back(Token{Token::Type::kText, std::move(text), line_, 0, 0});
  }

  // Skips what follows a tag's end: all whitespace after a '-' end, else
  // (blocks and comments) one newline. Returns whether the consumed text ends
  // in a newline (jinja2's line_starting).
  bool after_tag(size_t end, bool strip, bool trim) {
    size_t p = end;
    if (strip) {
      while (size_t n = space_at(src_, p)) p += n;
    }
    if (trim && p < src_.size() && src_[p] == '\n') ++p;
    advance_to(p);
    return p > end && src_[p - 1] == '\n';
  }

  bool comment(size_t body) {
    const size_t end = src_.find("#}", body);
    if (end == std::string::npos) fail(line_, "a comment is not closed (missing '#}')");
    const bool strip = end > body && src_[end - 1] == '-';
    return after_tag(end + 2, strip, true);
  }

  bool tag_tokens(char kind, size_t body) {
    const int open_line = line_;
    const bool block = kind == '%';
    tokens_.push_back(Token{block ? Token::Type::kBlockBegin : Token::Type::kVariableBegin, "", line_, 0, 0});
    const size_t first_token = tokens_.size();
    advance_to(body);
    int depth = 0;  // open brackets: an end marker inside them is an operator
    const std::string_view end_marker = block ? "%}" : "}}";
    while (true) {
      while (pos_ < src_.size() && (src_[pos_] == ' ' || src_[pos_] == '\t' || src_[pos_] == '\n' || src_[pos_] == '\r' ||
                                    src_[pos_] == '\f' || src_[pos_] == '\v'))
        advance_to(pos_ + 1);
      if (pos_ >= src_.size())
        fail(open_line, std::string("a ") + (block ? "block tag" : "variable tag") + " is not closed (missing '" +
                            std::string(end_marker) + "')");
      const std::string_view rest = std::string_view(src_).substr(pos_);
      if (depth == 0) {
        const bool dash_end = rest.size() >= 3 && rest[0] == '-' && rest.substr(1, 2) == end_marker;
        if (dash_end || rest.substr(0, 2) == end_marker) {
          tokens_.push_back(Token{block ? Token::Type::kBlockEnd : Token::Type::kVariableEnd, "", line_, 0, 0});
          const size_t end = pos_ + (dash_end ? 3 : 2);
          if (block && tokens_.size() == first_token + 2 && tokens_[first_token].type == Token::Type::kName &&
              tokens_[first_token].text == "raw") {
            tokens_.resize(first_token - 1);
            return raw(end, dash_end);
          }
          return after_tag(end, dash_end, block);
        }
      }
      const char c = rest[0];
      if (is_name_start(c)) {
        size_t n = 1;
        while (n < rest.size() && is_name_char(rest[n])) ++n;
        tokens_.push_back(Token{Token::Type::kName, std::string(rest.substr(0, n)), line_, 0, 0});
        advance_to(pos_ + n);
      } else if (is_digit(c)) {
        number(rest);
      } else if (c == '\'' || c == '"') {
        string_literal(rest);
      } else {
        static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
        size_t n = 0;
        for (std::string_view op : kTwo)
          if (rest.substr(0, 2) == op) n = 2;
        if (n == 0) {
          if (std::string_view("+-*/%~<>=.,:|()[]{}").find(c) == std::string_view::npos)
            fail(line_, "unexpected character " + py::repr(rest.substr(0, 1)) + " in a tag");
          n = 1;
          if (c == '(' || c == '[' || c == '{') ++depth;
          if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        }
        tokens_.push_back(Token{Token::Type::kOperator, std::string(rest.substr(0, n)), line_, 0, 0});
        advance_to(pos_ + n);
      }
    }
  }

  // After {% raw %}: everything up to {% endraw %} is text.
  bool raw(size_t start, bool strip_start) {
    size_t p = start;
    if (strip_start) {
      while (size_t n = space_at(src_, p)) p += n;
    } else if (p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    advance_to(p);
    for (size_t i = p; (i = src_.find("{%", i)) != std::string::npos; i += 2) {
      size_t k = i + 2;
      const char sign = k < src_.size() ? src_[k] : '\0';
      if (sign == '-' || sign == '+') ++k;
      while (k < src_.size() && (src_[k] == ' ' || src_[k] == '\t' || src_[k] == '\n')) ++k;
      if (src_.compare(k, 6, "endraw") != 0) continue;
      k += 6;
      while (k < src_.size() && (src_[k] == ' ' || src_[k] == '\t' || src_[k] == '\n')) ++k;
      const bool dash_end = src_.compare(k, 3, "-%}") == 0;
      if (!dash_end && src_.compare(k, 2, "%}") != 0) continue;
      std::string text = src_.substr(p, i - p);
      if (sign == '-') text = py::strip(text, std::nullopt, false, true);
      emit_text(std::move(text));
      advance_to(i);
      return after_tag(k + (dash_end ? 3 : 2), dash_end, true);
    }
    fail(line_, "a 'raw' block is not closed (missing 'endraw')");
  }

  void number(std::string_view rest) {
    size_t n = 0;
    auto digits = [&] {
      while (n < rest.size() && (is_digit(rest[n]) || (rest[n] == '_' && n + 1 < rest.size() && is_digit(rest[n + 1]))))
        ++n;
    };
    digits();
    bool is_float = false;
    if (n + 1 < rest.size() && rest[n] == '.' && is_digit(rest[n + 1])) {
      is_float = true;
      ++n;
      digits();
    }
    if (n < rest.size() && (rest[n] == 'e' || rest[n] == 'E')) {
      size_t k = n + 1;
      if (k < rest.size() && (rest[k] == '+' || rest[k] == '-')) ++k;
      if (k < rest.size() && is_digit(rest[k])) {
        is_float = true;
        n = k;
        digits();
      }
    }
    std::string text;
    for (char ch : rest.substr(0, n))
      if (ch != '_') text += ch;
    Token token{is_float ? Token::Type::kFloat : Token::Type::kInteger, text, line_, 0, 0};
    if (is_float) {
      token.floating = std::strtod(text.c_str(), nullptr);
    } else {
      const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), token.integer);
      (void)ptr;
      if (ec != std::errc()) fail(line_, "the integer " + text + " is too large");
    }
    tokens_.push_back(std::move(token));
    advance_to(pos_ + n);
  }

  // A quoted string with Python's escapes (jinja2 decodes "unicode-escape").
  void string_literal(std::string_view rest) {
    const char quote = rest[0];
    std::string value;
    size_t i = 1;
    auto hex = [&](size_t digits) -> char32_t {
      if (i + digits > rest.size()) fail(line_, "a truncated escape in a string");
      char32_t v = 0;
      for (size_t k = 0; k < digits; ++k) {
        const char h = rest[i + k];
        const int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
        if (d < 0) fail(line_, "a malformed escape in a string");
        v = v * 16 + static_cast<char32_t>(d);
      }
      i += digits;
      if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) fail(line_, "an escape in a string names no character");
      return v;
    };
    while (true) {
      if (i >= rest.size()) fail(line_, "a string is not closed");
      const char c = rest[i];
      if (c == quote) {
        ++i;
        break;
      }
      if (c != '\\') {
        value += c;
        ++i;
        continue;
      }
      if (i + 1 >= rest.size()) fail(line_, "a string is not closed");
      const char e = rest[i + 1];
      i += 2;
      switch (e) {
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'n': value += '\n'; break;
        case 'r': value += '\r'; break;
        case 't': value += '\t'; break;
        case 'v': value += '\v'; break;
        case '\n': break;  // a line continuation
        case 'x': py::append_utf8(value, hex(2)); break;
        case 'u': py::append_utf8(value, hex(4)); break;
        case 'U': py::append_utf8(value, hex(8)); break;
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && i < rest.size() && rest[i] >= '0' && rest[i] <= '7'; ++k, ++i)
              v = v * 8 + static_cast<char32_t>(rest[i] - '0');
            py::append_utf8(value, v);
          } else {
            value += '\\';  // Python keeps an unknown escape as it is
            i -= 1;
          }
      }
    }
    tokens_.push_back(Token{Token::Type::kString, std::move(value), line_, 0, 0});
    advance_to(pos_ + i);
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  check_utf8(source);
  return Lexer(normalize_newlines(source)).run();
}

}  // namespace hiq::jinja
