// tokenizer/regex_split.h — the regex splits of pre-tokenization (a Split
// step of tokenizer.json, and GPT-2's pattern inside the ByteLevel step),
// compiled with PCRE2 (Debian libpcre2-dev).
//
// Hugging Face compiles these patterns with Oniguruma. The two engines agree
// on the constructs the byte-level tokenizers use — alternation, classes,
// \p{L} \p{N} \s \S (both: Unicode White_Space), counted repeats, (?i:...),
// lookahead — and both try alternatives left to right, so they split alike.
// Constructs whose meaning differs between them are refused when the pattern
// is compiled, never guessed at: \w \W \b \B (Unicode word differs), \h \H
// (hex digit in Oniguruma, horizontal space in PCRE2), ^ and $ (always line
// anchors in Oniguruma), inline flags other than i, and nested classes or
// class intersection (&&).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace hiq {

// GPT-2's pre-tokenization pattern, which a ByteLevel step with use_regex applies.
inline constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// One compiled split pattern. Immutable and safe to share between threads;
// copies share the compiled code.
class RegexSplitter {
 public:
  // Per-call state of the matcher, reused across the pieces of one text;
  // one per thread at a time (any splitter may use it).
  class Scratch {
   public:
    Scratch();
    ~Scratch();
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;

   private:
    friend class RegexSplitter;
    void* match_data_ = nullptr;  // pcre2_match_data, sized for the pattern
  };

  // Compiles `pattern`: a regex (Regex in tokenizer.json) or, when `literal`,
  // a plain string (String). Errors (kInvalidArgument, naming `field`): a
  // refused construct (see the header comment), a pattern PCRE2 cannot
  // compile (with the offset), an empty literal.
  static Result<RegexSplitter> compile(std::string_view pattern, bool literal, std::string_view field);

  // Splits `text` (valid UTF-8) the way Hugging Face's Split step with
  // behavior "Isolated" does: every match and every stretch between matches
  // is a piece; empty pieces are dropped. Calls `piece` for each in order and
  // stops at the first error it returns. Errors from the matcher itself
  // (its memory limit) are kResourceExhausted.
  Status split(std::string_view text, Scratch& scratch,
               const std::function<Status(std::string_view)>& piece) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::shared_ptr<const Code> code_;  // the compiled pattern (JIT-compiled when PCRE2 can)
  std::string pattern_;               // the source, for messages
};

}  // namespace hiq
