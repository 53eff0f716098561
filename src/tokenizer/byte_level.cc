#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace hiq {
namespace {

bool stands_for_itself(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to
// U+0100 + n in byte order. The highest code point used is U+0143.
constexpr char32_t kHighestCodePoint = 0x143;

struct Alphabet {
  std::array<std::string, 256> char_of_byte;          // UTF-8 of the character for each byte
  std::array<int16_t, kHighestCodePoint + 1> byte_of;  // the byte a code point stands for, or -1

  Alphabet() {
    byte_of.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = stands_for_itself(b) ? static_cast<char32_t>(b) : next++;
      append_utf8(char_of_byte[b], cp);
      byte_of[cp] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet kAlphabet;
  return kAlphabet;
}

}  // namespace

std::string_view byte_level_char(uint8_t byte) { return alphabet().char_of_byte[byte]; }

void append_byte_level(std::string& out, std::string_view bytes) {
  const Alphabet& a = alphabet();
  for (char c : bytes) out += a.char_of_byte[static_cast<uint8_t>(c)];
}

std::string byte_level_decode(std::string_view token) {
  const Alphabet& a = alphabet();
  std::string bytes;
  bytes.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    const Utf8Step step = utf8_step(token, pos);
    if (step.kind != Utf8Step::Kind::kValid) return std::string(token);
    // Every character of the alphabet is one or two bytes long (≤ U+0143).
    char32_t cp = 0;
    if (step.length == 1) {
      cp = static_cast<uint8_t>(token[pos]);
    } else if (step.length == 2) {
      cp = (static_cast<char32_t>(static_cast<uint8_t>(token[pos]) & 0x1F) << 6) |
           (static_cast<uint8_t>(token[pos + 1]) & 0x3F);
    } else {
      return std::string(token);
    }
    if (cp > kHighestCodePoint || a.byte_of[cp] < 0) return std::string(token);
    bytes += static_cast<char>(a.byte_of[cp]);
    pos += step.length;
  }
  return bytes;
}

}  // namespace hiq
