// tokenizer/utf8.h — UTF-8 as the tokenizer needs it: strict validation that
// says where and why a text is not UTF-8, and the lossy repair that decoders
// apply to model output (which may stop in the middle of a character).
//
// Well-formed UTF-8 is Table 3-7 of the Unicode Standard: no overlong forms,
// no surrogates (U+D800..U+DFFF), nothing above U+10FFFF. Repair follows the
// standard's "substitution of maximal subparts" (as Rust's from_utf8_lossy,
// and so Hugging Face's decoders, do): each maximal ill-formed subpart becomes
// one U+FFFD.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/status.h"

namespace hiq {

// What the bytes at one position of a text hold.
struct Utf8Step {
  enum class Kind {
    kValid,       // a well-formed character of `length` bytes
    kInvalid,     // `length` bytes (≥ 1) that no continuation can make well-formed
    kIncomplete,  // the text ends inside a sequence that more bytes could complete
  };
  Kind kind = Kind::kValid;
  size_t length = 0;  // bytes taken by this step; for kIncomplete, the rest of the text
  // For kInvalid and kIncomplete: why, for messages ("a continuation byte with
  // no lead byte", "an overlong encoding", "a surrogate", ...).
  std::string_view reason;
};

// Classifies the bytes of `text` starting at `pos` (< text.size()).
Utf8Step utf8_step(std::string_view text, size_t pos);

// OK for well-formed UTF-8; otherwise kInvalidArgument naming `what`, the byte
// offset of the first bad sequence, its first byte in hex and the reason:
// "text is not valid UTF-8 at byte offset 3 (0xc0): an overlong encoding".
Status validate_utf8(std::string_view text, std::string_view what = "text");

// `bytes` with each ill-formed subpart (a truncated sequence at the end
// included) replaced by U+FFFD; well-formed input comes back unchanged.
std::string to_valid_utf8(std::string_view bytes);

// Appends the UTF-8 encoding of `code_point` (≤ U+10FFFF, not a surrogate).
void append_utf8(std::string& out, char32_t code_point);

inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace hiq
