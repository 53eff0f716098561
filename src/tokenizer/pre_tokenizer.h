// tokenizer/pre_tokenizer.h — pre-tokenization of byte-level tokenizers:
// cutting normalized text into the words that BPE merges within.
//
// Two shapes of tokenizer.json's "pre_tokenizer" are accepted:
//   {"type": "ByteLevel", "add_prefix_space": …, "use_regex": …}      (GPT-2)
//   {"type": "Sequence", "pretokenizers": [
//       {"type": "Split", "pattern": {"Regex": …} or {"String": …},
//        "behavior": "Isolated", "invert": false}, …,
//       {"type": "ByteLevel", …}]}                        (Qwen2/3, Llama 3)
// The Split steps run in order, each on every piece of the one before; then
// ByteLevel puts a space before each piece that lacks one (add_prefix_space)
// and splits it with GPT-2's pattern (use_regex, the default). The byte-level
// spelling itself is the BPE model's business (it merges raw bytes).
// Anything else — another step type or behavior, invert, ByteLevel not last
// or missing — is refused with the field named.
#pragma once

#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "tokenizer/regex_split.h"

namespace hiq {

class PreTokenizer {
 public:
  // Reads tokenizer.json's "pre_tokenizer" value; errors name the field
  // ("pre_tokenizer.pretokenizers[0].behavior") and say what is supported.
  static Result<PreTokenizer> from_json(const nlohmann::json& value);

  // Calls `word` with each pre-token of `text` (valid UTF-8), in order, as
  // raw bytes; a view that is valid during the call only. Stops at the first
  // error `word` returns.
  Status for_each_word(std::string_view text, const std::function<Status(std::string_view)>& word) const;

 private:
  Status run(size_t stage, std::string_view text, std::vector<RegexSplitter::Scratch>& scratch,
             const std::function<Status(std::string_view)>& word) const;

  std::vector<RegexSplitter> splits_;          // the Split steps, in order
  bool add_prefix_space_ = false;              // ByteLevel: put ' ' before each piece not starting with one
  std::optional<RegexSplitter> byte_level_regex_;  // ByteLevel with use_regex: GPT-2's pattern
};

}  // namespace hiq
