#include "tokenizer/utf8.h"

#include <cstdint>

namespace hiq {
namespace {

bool in(uint8_t b, uint8_t lo, uint8_t hi) { return b >= lo && b <= hi; }

Utf8Step invalid(size_t length, std::string_view reason) { return {Utf8Step::Kind::kInvalid, length, reason}; }

}  // namespace

Utf8Step utf8_step(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[pos + i]); };
  const uint8_t lead = byte(0);
  if (lead < 0x80) return {Utf8Step::Kind::kValid, 1, {}};
  if (lead < 0xC2) {
    return lead < 0xC0 ? invalid(1, "a continuation byte with no lead byte")
                       : invalid(1, "an overlong encoding");
  }
  if (lead > 0xF4) {
    return lead < 0xF8 ? invalid(1, "a code point above U+10FFFF") : invalid(1, "a byte that never occurs in UTF-8");
  }
  const size_t length = lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
  // Table 3-7: the second byte's range depends on the lead; the others are 80..BF.
  uint8_t lo = 0x80, hi = 0xBF;
  std::string_view second_reason = "a truncated sequence";
  if (lead == 0xE0) lo = 0xA0, second_reason = "an overlong encoding";
  if (lead == 0xED) hi = 0x9F, second_reason = "a surrogate (U+D800..U+DFFF)";
  if (lead == 0xF0) lo = 0x90, second_reason = "an overlong encoding";
  if (lead == 0xF4) hi = 0x8F, second_reason = "a code point above U+10FFFF";
  for (size_t i = 1; i < length; ++i) {
    if (pos + i >= text.size())
      return {Utf8Step::Kind::kIncomplete, text.size() - pos, "a sequence cut short by the end of the text"};
    const bool ok = i == 1 ? in(byte(i), lo, hi) : in(byte(i), 0x80, 0xBF);
    if (!ok) {
      // A continuation byte outside the second byte's range says what the
      // sequence would have encoded; anything else just ends it early.
      const bool wrong_range = i == 1 && in(byte(i), 0x80, 0xBF);
      return invalid(i, wrong_range ? second_reason : "a truncated sequence");
    }
  }
  return {Utf8Step::Kind::kValid, length, {}};
}

Status validate_utf8(std::string_view text, std::string_view what) {
  size_t pos = 0;
  while (pos < text.size()) {
    // ASCII runs are the common case; skip them eight bytes at a time.
    while (pos + 8 <= text.size()) {
      uint64_t word = 0;
      for (size_t i = 0; i < 8; ++i) word |= static_cast<uint64_t>(static_cast<uint8_t>(text[pos + i])) << (8 * i);
      if (word & 0x8080808080808080ull) break;
      pos += 8;
    }
    if (pos >= text.size()) break;
    const Utf8Step step = utf8_step(text, pos);
    if (step.kind != Utf8Step::Kind::kValid) {
      constexpr char kHex[] = "0123456789abcdef";
      const auto b = static_cast<uint8_t>(text[pos]);
      std::string message(what);
      message += " is not valid UTF-8 at byte offset " + std::to_string(pos) + " (0x";
      message += kHex[b >> 4];
      message += kHex[b & 15];
      message += "): " + std::string(step.reason);
      return invalid_argument(std::move(message));
    }
    pos += step.length;
  }
  return Status::ok();
}

std::string to_valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Utf8Step step = utf8_step(bytes, pos);
    if (step.kind == Utf8Step::Kind::kValid) out.append(bytes.substr(pos, step.length));
    else out.append(kReplacementCharacter);
    pos += step.length;
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  HIQ_DCHECK(cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF));
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace hiq
