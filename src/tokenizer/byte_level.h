// tokenizer/byte_level.h — GPT-2's byte-level alphabet, which Qwen2/Qwen3 and
// Llama 3 vocabularies are written in.
//
// Byte-level BPE works on bytes, but vocabularies are JSON strings, so every
// byte is written as one printable character: the bytes that are printable
// Latin-1 ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves, and the other
// 68 (controls, space, 0x7F..0xA0, 0xAD) become U+0100.. in byte order — so a
// space is 'Ġ' (U+0120) and a newline 'Ċ' (U+010A).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace hiq {

// The character that stands for `byte`, as UTF-8 (one or two bytes).
std::string_view byte_level_char(uint8_t byte);

// Appends the byte-level spelling of `bytes` (one character per byte).
void append_byte_level(std::string& out, std::string_view bytes);

// The bytes a vocabulary string stands for, as Hugging Face's ByteLevel
// decoder computes them: each character mapped back to its byte when every
// character of `token` is in the alphabet, otherwise `token`'s own UTF-8
// bytes unchanged (added tokens such as "<|im_end|>" are printable ASCII, so
// both rules give the same bytes for them).
std::string byte_level_decode(std::string_view token);

}  // namespace hiq
