#include "tokenizer/regex_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cctype>
#include <cstring>
#include <optional>

#include "tokenizer/unicode_classes.h"
#include "tokenizer/utf8.h"

namespace hiq {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof buffer) < 0) return "PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buffer);
}

Status refuse(std::string_view field, size_t offset, std::string_view what) {
  return invalid_argument("field '" + std::string(field) + "' uses " + std::string(what) + " at offset " +
                          std::to_string(offset) +
                          ", whose meaning differs between Oniguruma (Hugging Face) and PCRE2; refused rather "
                          "than splitting differently");
}

// Refuses the constructs that Oniguruma (Ruby syntax, as Hugging Face uses it)
// and PCRE2 read differently; see the header comment.
Status check_portable(std::string_view p, std::string_view field) {
  bool in_class = false;
  size_t class_first = 0;  // where a class's members start (a ']' there is a member)
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= p.size()) break;  // PCRE2 reports the dangling backslash
      const char e = p[i + 1];
      if (std::strchr("wWbBhH", e) != nullptr) return refuse(field, i, std::string("\\") + e);
      i += 1;
      // \p{...}, \x{...}, \N{...}: skip the braces, which may hold '^'.
      if (i + 1 < p.size() && p[i + 1] == '{') {
        const size_t close = p.find('}', i + 1);
        if (close != std::string_view::npos) i = close;
      }
      continue;
    }
    if (in_class) {
      if (c == ']' && i != class_first) {
        in_class = false;
      } else if (c == '[') {
        if (i + 1 < p.size() && p[i + 1] == ':') {  // a POSIX class such as [:alpha:]
          const size_t close = p.find(":]", i + 2);
          if (close != std::string_view::npos) {
            i = close + 1;
            continue;
          }
        }
        return refuse(field, i, "a nested character class");
      } else if (c == '&' && i + 1 < p.size() && p[i + 1] == '&') {
        return refuse(field, i, "class intersection (&&)");
      }
      continue;
    }
    if (c == '[') {
      in_class = true;
      class_first = i + 1 < p.size() && p[i + 1] == '^' ? i + 2 : i + 1;
    } else if (c == '^' || c == '$') {
      return refuse(field, i, std::string("the anchor ") + c);
    } else if (c == '(' && i + 1 < p.size() && p[i + 1] == '?') {
      size_t j = i + 2;
      while (j < p.size() && (std::isalpha(static_cast<unsigned char>(p[j])) || p[j] == '-')) ++j;
      if (j > i + 2 && j < p.size() && (p[j] == ':' || p[j] == ')')) {
        for (size_t k = i + 2; k < j; ++k)
          if (p[k] != 'i' && p[k] != '-') return refuse(field, i, std::string("the inline flag ") + p[k]);
      }
    }
  }
  return Status::ok();
}

}  // namespace

struct RegexSplitter::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

RegexSplitter::Scratch::Scratch() {
  // One offset pair is all a split reads.
  match_data_ = pcre2_match_data_create(1, nullptr);
  HIQ_CHECK_MSG(match_data_ != nullptr, "out of memory for PCRE2 match data");
}

RegexSplitter::Scratch::~Scratch() { pcre2_match_data_free(static_cast<pcre2_match_data*>(match_data_)); }

Result<RegexSplitter> RegexSplitter::compile(std::string_view pattern, bool literal, std::string_view field) {
  if (literal && pattern.empty()) return invalid_argument("field '" + std::string(field) + "' is empty");
  HIQ_RETURN_IF_ERROR(validate_utf8(pattern, "field '" + std::string(field) + "'"));
  std::string rewritten;
  if (!literal) {
    HIQ_RETURN_IF_ERROR(check_portable(pattern, field));
    HIQ_ASSIGN_OR_RETURN(rewritten, rewrite_unicode_classes(pattern, field));
  }
  const std::string_view source = literal ? pattern : std::string_view(rewritten);

  int error = 0;
  PCRE2_SIZE error_offset = 0;
  // PCRE2_LITERAL admits no UCP; a literal needs no character properties.
  const uint32_t options = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(), options, &error,
                                   &error_offset, nullptr);
  if (code == nullptr) {
    return invalid_argument("field '" + std::string(field) + "' is a pattern PCRE2 cannot compile: " +
                            pcre2_message(error) + " at offset " + std::to_string(error_offset) +
                            (source == pattern ? "" : " (of the pattern with its Unicode classes spelt out)"));
  }
  auto owner = std::make_shared<Code>();
  owner->code = code;
  // JIT is an optimisation: without it (an unsupported CPU) the interpreter
  // gives the same matches.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);

  RegexSplitter splitter;
  splitter.code_ = std::move(owner);
  splitter.pattern_ = std::string(pattern);
  return splitter;
}

Status RegexSplitter::split(std::string_view text, Scratch& scratch,
                            const std::function<Status(std::string_view)>& piece) const {
  auto* match_data = static_cast<pcre2_match_data*>(scratch.match_data_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t search = 0;                      // where the next search starts (a character boundary)
  size_t emitted = 0;                     // text before this is already in pieces
  std::optional<size_t> last_match_end;  // Oniguruma's find_iter skips an empty match here
  while (search <= n) {
    int rc = pcre2_match(code_->code, subject, n, search, PCRE2_NO_UTF_CHECK, match_data, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
      rc = pcre2_match(code_->code, subject, n, search, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, match_data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      const std::string why = pcre2_message(rc);
      if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
          rc == PCRE2_ERROR_NOMEMORY)
        return resource_exhausted("splitting a " + std::to_string(n) + "-byte piece with the pattern: " + why);
      return internal_error("PCRE2 failed to match: " + why);
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data);
    const size_t start = ovector[0], end = ovector[1];
    if (start == end && last_match_end == end) {
      // As Oniguruma's iterator: no empty match right where the last one
      // ended; move one character on and search again.
      if (end >= n) break;
      search = end + utf8_step(text, end).length;
      continue;
    }
    if (emitted < start) HIQ_RETURN_IF_ERROR(piece(text.substr(emitted, start - emitted)));
    if (start < end) HIQ_RETURN_IF_ERROR(piece(text.substr(start, end - start)));
    emitted = end;
    search = end;
    last_match_end = end;
  }
  if (emitted < n) HIQ_RETURN_IF_ERROR(piece(text.substr(emitted)));
  return Status::ok();
}

}  // namespace hiq
