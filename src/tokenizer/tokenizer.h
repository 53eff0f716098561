// tokenizer/tokenizer.h — text ↔ token ids for `hiq serve`: the byte-level
// BPE tokenizers of Qwen2/Qwen3 and Llama 3, read from a Hugging Face
// tokenizer.json, giving exactly the ids Hugging Face `tokenizers` gives
// (tests/tokenizer_test.cc checks every case of tests/data/tokenizers/).
//
// Encoding runs Hugging Face's steps in its order:
//   1. the text must be valid UTF-8 (an error names the byte offset);
//   2. added tokens whose `normalized` is false — all special tokens in
//      practice — are cut out of the raw text, leftmost and longest first
//      (special ones only when parse_special);
//   3. every stretch between them is normalized (NFC, when the file asks)
//      and added tokens with `normalized` true are cut out of the result;
//   4. pre-tokenization splits each stretch into words (pre_tokenizer.h);
//   5. BPE merges each word's bytes into ids (bpe.h).
// What encode() returns is Hugging Face's encode(text,
// add_special_tokens=False): the post-processor (a BOS that a
// TemplateProcessing would add) is not applied — chat templates write their
// special tokens into the text. Decoding maps each id to the bytes of its
// token and concatenates them; the result may end inside a character (use
// StreamDecoder, or to_valid_utf8 from utf8.h, for text to show).
//
// What a tokenizer.json may hold, and what is refused (always with the field
// named, never with a silent difference): docs/tokenizer.md.
//
// A Tokenizer is immutable once loaded; encode and decode are const and safe
// to call from many threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"

namespace hiq {

// One entry of tokenizer.json's "added_tokens".
struct AddedToken {
  int32_t id = 0;       // its id (checked against the id Hugging Face would give it)
  std::string content;  // the text it matches, e.g. "<|im_start|>"
  bool special = false;     // skipped by decode(skip_special); matched only when parse_special
  bool normalized = false;  // matched in normalized text (NFC of content) instead of raw text
};

class Tokenizer {
 public:
  // Reads a tokenizer.json, or the tokenizer.json inside a model directory.
  // Errors: kNotFound for a missing file; kInvalidArgument for a special or
  // oversized (> 512 MiB) file and for content we do not support or that is
  // inconsistent (naming the file and the field); kDataLoss for invalid JSON
  // or a failed read.
  static Result<Tokenizer> load(const std::string& path);

  // The same from the text of a tokenizer.json; `source` names it in errors.
  static Result<Tokenizer> from_json(std::string_view json_text, std::string_view source);

  // The ids of `text`. With parse_special, special tokens written in the text
  // ("<|im_start|>") become their ids; without it they are ordinary text
  // (added tokens that are not special are matched either way, as in Hugging
  // Face). Empty text gives no ids. Errors (kInvalidArgument): text that is
  // not valid UTF-8 (the message names the byte offset and the problem); a
  // byte whose token the vocabulary lacks.
  Result<std::vector<int32_t>> encode(std::string_view text, bool parse_special = true) const;

  // The bytes of `ids` in order. Ids that no token has (negative, beyond the
  // vocabulary, or holes in it) contribute nothing, as in Hugging Face;
  // special tokens are left out when skip_special. The bytes may end inside
  // a character, or hold an ill-formed sequence if the ids were not produced
  // by encode (a model may emit any id).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The bytes of one id ("" when no token has it).
  std::string_view token_bytes(int32_t id) const;

  // The id of a token: an added token's content, or a vocabulary string in
  // the byte-level alphabet (" hello" is "Ġhello").
  std::optional<int32_t> token_id(std::string_view token) const;
  // The token string of an id (as token_id takes it), if some token has it.
  std::optional<std::string> id_to_token(int32_t id) const;

  // One above the highest id of any token (vocabulary or added); the
  // embedding table of a model must have at least this many rows.
  size_t vocab_size() const { return token_bytes_.size(); }
  // Whether `id` is an added token marked special.
  bool is_special(int32_t id) const;
  // Whether a token has `id`.
  bool has_id(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const { return added_; }
  // Whether text is NFC-normalized before pre-tokenization.
  bool normalizes_nfc() const { return nfc_; }
  // What the post-processor's TemplateProcessing puts before a text that
  // Hugging Face encodes with add_special_tokens (Llama 3's
  // <|begin_of_text|>); empty when it has none. encode() never adds it.
  const std::vector<int32_t>& template_prefix() const { return template_prefix_; }
  // Whether that template also appends tokens after the text.
  bool template_appends() const { return template_appends_; }

 private:
  // The flags of one id, for decode.
  enum IdFlags : uint8_t { kHasToken = 1, kSpecial = 2 };

  Tokenizer() = default;
  // The tokenizer a parsed tokenizer.json describes; errors name the field.
  static Result<Tokenizer> build(const nlohmann::json& root);
  Status encode_stretch(std::string_view raw, bool parse_special, std::vector<int32_t>& ids,
                        std::unordered_map<std::string, std::vector<int32_t>>& word_cache) const;
  Status encode_normalized(std::string_view text, std::vector<int32_t>& ids,
                           std::unordered_map<std::string, std::vector<int32_t>>& word_cache) const;

  BpeModel model_;             // vocabulary and merges
  PreTokenizer pre_tokenizer_; // splits into words
  bool nfc_ = false;           // the normalizer is NFC (else none)
  std::vector<AddedToken> added_;               // in file order
  std::unordered_map<std::string, size_t> added_by_content_;  // content → index in added_
  AddedTokenMatcher raw_matcher_;         // added tokens with normalized false → index in added_
  AddedTokenMatcher normalized_matcher_;  // added tokens with normalized true (NFC content) → index in added_
  std::vector<std::string> token_bytes_;  // id → the bytes decode gives for it
  std::vector<uint8_t> id_flags_;         // id → IdFlags
  std::vector<int32_t> template_prefix_;  // see template_prefix()
  bool template_appends_ = false;
};

}  // namespace hiq
