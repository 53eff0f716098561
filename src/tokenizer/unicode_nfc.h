// tokenizer/unicode_nfc.h — Unicode Normalization Form C, the normalizer of
// Qwen2/Qwen3 tokenizers, computed by utf8proc (Debian libutf8proc-dev).
//
// Hugging Face's NFC normalizer composes with the tables of its own Unicode
// version; utf8proc's may differ for characters assigned since. Both agree on
// every character our tests and real prompts in current scripts use.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace hiq {

// The NFC form of `text`, which must be valid UTF-8 (the tokenizer checks
// before it normalizes). Text whose characters are all below U+0300 is
// already in NFC and comes back without a call into utf8proc. Errors:
// kInternal when utf8proc fails (out of memory).
Result<std::string> to_nfc(std::string_view text);

}  // namespace hiq
