// fuzz/tokenizer_fuzz.cc — libFuzzer target of tokenizer.json loading and
// encoding. An input is a tokenizer.json, optionally followed by a NUL byte
// and a text to encode (without one, a fixed multilingual text is encoded).
// Loading must either be refused with an error that names the input, or give
// a tokenizer whose promises hold on the text: encode fails only with
// kInvalidArgument, every id it gives has a token, and streaming the ids one
// at a time yields exactly the repaired decode, well-formed UTF-8. A broken
// promise traps, so the fuzzer reports it like a crash. Built with
// HIQ_FUZZ=ON (clang); seeds in fuzz/corpus/tokenizer (docs/tokenizer.md).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

void require(bool promise) {
  if (!promise) __builtin_trap();
}

constexpr std::string_view kDefaultText =
    "Hello, world! It's 2026: 12345 ½ — Größe, 中文, 😀🇫🇷 e\u0301 <|im_start|>user\n  x\t\r\n";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view json_text = input.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? kDefaultText : input.substr(nul + 1);

  const auto tokenizer = hiq::Tokenizer::from_json(json_text, "fuzz-input");
  if (!tokenizer.is_ok()) {
    require(tokenizer.status().message().starts_with("fuzz-input"));
    return 0;
  }
  for (bool parse_special : {true, false}) {
    const auto ids = tokenizer->encode(text, parse_special);
    if (!ids.is_ok()) {
      require(ids.status().code() == hiq::StatusCode::kInvalidArgument);
      continue;
    }
    for (int32_t id : *ids) require(tokenizer->has_id(id) && static_cast<size_t>(id) < tokenizer->vocab_size());
    const std::string decoded = tokenizer->decode(*ids);
    hiq::StreamDecoder stream(*tokenizer);
    std::string streamed;
    for (int32_t id : *ids) streamed += stream.feed(id);
    streamed += stream.flush();
    require(streamed == hiq::to_valid_utf8(decoded));
    require(hiq::validate_utf8(streamed).is_ok());
  }
  return 0;
}
