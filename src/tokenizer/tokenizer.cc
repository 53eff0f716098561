#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "kv/config_reader.h"
#include "core/json_input.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/unicode_nfc.h"
#include "tokenizer/utf8.h"

namespace hiq {
namespace {

using nlohmann::json;
using WordCache = std::unordered_map<std::string, std::vector<int32_t>>;

// Real tokenizer.json files are up to a few tens of MB (Qwen2's is 7 MB).
constexpr uintmax_t kMaxFileBytes = uintmax_t{512} << 20;
// tokenizer.json nests about six levels (pre_tokenizer.pretokenizers[0].pattern).
constexpr int kMaxNesting = 64;
// Words longer than this are merged without the per-call cache (as Hugging
// Face's MAX_LENGTH): long runs are rarely repeated.
constexpr size_t kMaxCachedWordBytes = 256;

// "normalizer": null, NFC, or a Sequence of those. Returns whether NFC applies.
Result<bool> read_normalizer(const json& value, const std::string& path) {
  if (value.is_null()) return false;
  const std::string type = type_of(value);
  if (type == "NFC") return true;
  if (type == "Sequence") {
    const auto list = value.find("normalizers");
    if (list == value.end() || !list->is_array())
      return field_error(path + ".normalizers", "must be an array of normalizers");
    bool nfc = false;
    for (size_t i = 0; i < list->size(); ++i) {
      HIQ_ASSIGN_OR_RETURN(const bool one, read_normalizer((*list)[i], path + ".normalizers[" + std::to_string(i) + "]"));
      nfc = nfc || one;
    }
    return nfc;
  }
  return field_error(type.empty() ? path : path + ".type",
                     "is " + (type.empty() ? describe_json_value(value) : quote_for_message(type)) +
                         "; supported normalizers: null, NFC, or a Sequence of NFC");
}

// "post_processor": encode() never applies one (Hugging Face's
// add_special_tokens=False), but only kinds known to do nothing else are let
// through, so nothing unexpected is skipped silently. What a
// TemplateProcessing's single-sequence template adds is recorded: the names
// of the special tokens before the text (`before`), and whether it adds any
// after it.
struct TemplateAdditions {
  std::vector<std::string> before;
  bool after = false;
};

Status read_post_processor(const json& value, const std::string& path, TemplateAdditions& additions) {
  if (value.is_null()) return Status::ok();
  const std::string type = type_of(value);
  if (type == "ByteLevel") return Status::ok();
  if (type == "TemplateProcessing") {
    const json& single = member_or_null(value, "single");
    if (!single.is_array()) return field_error(path + ".single", "must be an array");
    bool after_text = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const json& piece = single[i];
      if (piece.is_object() && piece.contains("Sequence")) {
        after_text = true;
        continue;
      }
      const json& special = member_or_null(piece, "SpecialToken");
      HIQ_ASSIGN_OR_RETURN(std::string name,
                           required_string(special, "id", path + ".single[" + std::to_string(i) + "].SpecialToken"));
      if (after_text) additions.after = true;
      else additions.before.push_back(std::move(name));
    }
    return Status::ok();
  }
  if (type == "Sequence") {
    const auto list = value.find("processors");
    if (list == value.end() || !list->is_array()) return field_error(path + ".processors", "must be an array");
    for (size_t i = 0; i < list->size(); ++i)
      HIQ_RETURN_IF_ERROR(
          read_post_processor((*list)[i], path + ".processors[" + std::to_string(i) + "]", additions));
    return Status::ok();
  }
  return field_error(type.empty() ? path : path + ".type",
                     "is " + (type.empty() ? describe_json_value(value) : quote_for_message(type)) +
                         "; supported post-processors: null, ByteLevel, TemplateProcessing (never applied by "
                         "encode), or a Sequence of those");
}

}  // namespace

Result<Tokenizer> Tokenizer::load(const std::string& path) {
  std::filesystem::path file(path);
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) file /= "tokenizer.json";
  const std::string name = file.string();
  const auto status = std::filesystem::status(file, ec);
  if (!std::filesystem::exists(status)) return not_found(name + ": no such file");
  if (!std::filesystem::is_regular_file(status)) return invalid_argument(name + ": not a regular file");
  const uintmax_t size = std::filesystem::file_size(file, ec);
  if (ec) return data_loss(name + ": cannot read its size: " + ec.message());
  if (size > kMaxFileBytes)
    return invalid_argument(name + ": " + std::to_string(size) + " bytes; a tokenizer.json over 512 MiB is refused");
  std::ifstream in(file, std::ios::binary);
  std::string text(static_cast<size_t>(size), '\0');
  if (!in || !in.read(text.data(), static_cast<std::streamsize>(size)))
    return data_loss(name + ": reading failed");
  return from_json(text, name);
}

Result<Tokenizer> Tokenizer::from_json(std::string_view json_text, std::string_view source) {
  HIQ_ASSIGN_OR_RETURN(const json root, parse_strict_json(json_text, source, kMaxNesting));
  Result<Tokenizer> tokenizer = build(root);
  if (!tokenizer.is_ok()) return tokenizer.status().with_context(source);
  return tokenizer;
}

Result<Tokenizer> Tokenizer::build(const json& root) {
  if (!root.is_object()) return invalid_argument("expected a JSON object (got " + describe_json_value(root) + ")");
  if (const json& version = member_or_null(root, "version"); !version.is_null() && version != "1.0")
    return field_error("version", "is " + describe_json_value(version) + "; only \"1.0\" is known");

  Tokenizer tok;
  const json& model = member_or_null(root, "model");
  if (model.is_null()) return field_error("model", "is missing");
  HIQ_ASSIGN_OR_RETURN(tok.model_, BpeModel::from_json(model));
  HIQ_ASSIGN_OR_RETURN(tok.nfc_, read_normalizer(member_or_null(root, "normalizer"), "normalizer"));
  HIQ_ASSIGN_OR_RETURN(tok.pre_tokenizer_, PreTokenizer::from_json(member_or_null(root, "pre_tokenizer")));
  const json& decoder = member_or_null(root, "decoder");
  if (type_of(decoder) != "ByteLevel") {
    return field_error(decoder.is_object() ? "decoder.type" : "decoder",
                       "is " + (decoder.is_object() ? quote_for_message(type_of(decoder)) : describe_json_value(decoder)) +
                           "; a byte-level BPE needs the ByteLevel decoder");
  }
  TemplateAdditions additions;
  HIQ_RETURN_IF_ERROR(read_post_processor(member_or_null(root, "post_processor"), "post_processor", additions));

  // Added tokens get the ids Hugging Face would give them: a token's own id
  // when its content is already a token, else the next id after the
  // vocabulary. A file that says otherwise is refused (HF would warn and
  // renumber); so are flags that change matching, which these models leave false.
  const json& added = member_or_null(root, "added_tokens");
  if (!added.is_null() && !added.is_array())
    return field_error("added_tokens", "must be an array (got " + describe_json_value(added) + ")");
  auto next_new_id = static_cast<int64_t>(tok.model_.vocab_count());
  int32_t id_bound = tok.model_.id_bound();
  for (size_t i = 0; added.is_array() && i < added.size(); ++i) {
    const json& entry = added[i];
    const std::string path = "added_tokens[" + std::to_string(i) + "]";
    if (!entry.is_object()) return field_error(path, "must be an object (got " + describe_json_value(entry) + ")");
    AddedToken token;
    HIQ_ASSIGN_OR_RETURN(token.content, required_string(entry, "content", path));
    if (token.content.empty()) return field_error(path + ".content", "is empty");
    const json& id = member_or_null(entry, "id");
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxTokenIds)
      return field_error(path + ".id", "must be an id in [0, " + std::to_string(kMaxTokenIds) + ") (got " +
                                           describe_json_value(id) + ")");
    token.id = static_cast<int32_t>(id.get<int64_t>());
    HIQ_ASSIGN_OR_RETURN(token.special, optional_bool(entry, "special", false, path));
    HIQ_ASSIGN_OR_RETURN(token.normalized, optional_bool(entry, "normalized", !token.special, path));
    for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
      HIQ_ASSIGN_OR_RETURN(const bool set, optional_bool(entry, flag, false, path));
      if (set)
        return field_error(path + "." + flag,
                           "is true for " + quote_for_message(token.content) + "; only false is supported");
    }
    if (tok.added_by_content_.contains(token.content))
      return field_error(path + ".content", quote_for_message(token.content) + " is added twice");
    const std::optional<int32_t> in_vocab = tok.model_.token_id(token.content);
    const int64_t expected = in_vocab ? *in_vocab : next_new_id++;
    if (token.id != expected)
      return field_error(path + ".id", "is " + std::to_string(token.id) + " for " + quote_for_message(token.content) +
                                           ", but Hugging Face gives it " + std::to_string(expected) +
                                           " (its id in the vocabulary, else the next id after the vocabulary)");
    id_bound = std::max(id_bound, token.id + 1);
    tok.added_by_content_.emplace(token.content, tok.added_.size());
    tok.added_.push_back(std::move(token));
  }

  // What each id decodes to, and the matchers. A normalized added token is
  // matched, and decoded, as its normalized form (as in Hugging Face).
  tok.token_bytes_.assign(static_cast<size_t>(id_bound), std::string());
  tok.id_flags_.assign(static_cast<size_t>(id_bound), 0);
  for (int32_t id = 0; id < tok.model_.id_bound(); ++id) {
    if (const std::string* token = tok.model_.token(id)) {
      tok.token_bytes_[id] = byte_level_decode(*token);
      tok.id_flags_[id] = kHasToken;
    }
  }
  for (size_t i = 0; i < tok.added_.size(); ++i) {
    const AddedToken& token = tok.added_[i];
    std::string form = token.content;
    if (token.normalized && tok.nfc_) {
      HIQ_ASSIGN_OR_RETURN(form, to_nfc(token.content));
    }
    (token.normalized ? tok.normalized_matcher_ : tok.raw_matcher_).add(form, static_cast<int32_t>(i));
    tok.token_bytes_[token.id] = byte_level_decode(form);
    tok.id_flags_[token.id] = static_cast<uint8_t>(kHasToken | (token.special ? kSpecial : 0));
  }
  // The template's tokens, by name, once every token has its id.
  for (const std::string& name : additions.before) {
    const std::optional<int32_t> id = tok.token_id(name);
    if (!id) return field_error("post_processor", "names the token " + quote_for_message(name) + ", which is no token");
    tok.template_prefix_.push_back(*id);
  }
  tok.template_appends_ = additions.after;
  return tok;
}

namespace {

// Cuts `text` at the matches of `matcher` (values index `added`): calls
// `stretch` for the text between them and appends the ids of the matches.
// Special tokens are passed over, as text, unless `parse_special`.
template <typename OnStretch>
Status split_on_added_tokens(const AddedTokenMatcher& matcher, const std::vector<AddedToken>& added,
                             std::string_view text, bool parse_special, std::vector<int32_t>& ids,
                             const OnStretch& stretch) {
  size_t stretch_start = 0;
  size_t search = 0;
  if (!matcher.empty()) {
    while (const auto match = matcher.find(text, search)) {
      search = match->end;
      const AddedToken& token = added[static_cast<size_t>(match->value)];
      if (token.special && !parse_special) continue;
      if (match->start > stretch_start)
        HIQ_RETURN_IF_ERROR(stretch(text.substr(stretch_start, match->start - stretch_start)));
      ids.push_back(token.id);
      stretch_start = match->end;
    }
  }
  if (stretch_start < text.size()) HIQ_RETURN_IF_ERROR(stretch(text.substr(stretch_start)));
  return Status::ok();
}

}  // namespace

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text, bool parse_special) const {
  HIQ_RETURN_IF_ERROR(validate_utf8(text));
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  WordCache cache;
  HIQ_RETURN_IF_ERROR(split_on_added_tokens(raw_matcher_, added_, text, parse_special, ids, [&](std::string_view raw) {
    return encode_stretch(raw, parse_special, ids, cache);
  }));
  return ids;
}

Status Tokenizer::encode_stretch(std::string_view raw, bool parse_special, std::vector<int32_t>& ids,
                                 WordCache& cache) const {
  std::string normalized;
  std::string_view text = raw;
  if (nfc_) {
    HIQ_ASSIGN_OR_RETURN(normalized, to_nfc(raw));
    text = normalized;
  }
  return split_on_added_tokens(normalized_matcher_, added_, text, parse_special, ids,
                               [&](std::string_view part) { return encode_normalized(part, ids, cache); });
}

Status Tokenizer::encode_normalized(std::string_view text, std::vector<int32_t>& ids, WordCache& cache) const {
  return pre_tokenizer_.for_each_word(text, [&](std::string_view word) -> Status {
    if (word.size() < 2 || word.size() > kMaxCachedWordBytes) return model_.encode_word(word, ids);
    const auto [it, inserted] = cache.try_emplace(std::string(word));
    if (!inserted) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return Status::ok();
    }
    const size_t before = ids.size();
    HIQ_RETURN_IF_ERROR(model_.encode_word(word, ids));
    it->second.assign(ids.begin() + static_cast<std::ptrdiff_t>(before), ids.end());
    return Status::ok();
  });
}

bool Tokenizer::has_id(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < id_flags_.size() && (id_flags_[id] & kHasToken) != 0;
}

bool Tokenizer::is_special(int32_t id) const { return has_id(id) && (id_flags_[id] & kSpecial) != 0; }

std::string_view Tokenizer::token_bytes(int32_t id) const {
  return has_id(id) ? std::string_view(token_bytes_[id]) : std::string_view();
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (!has_id(id)) continue;
    if (skip_special && (id_flags_[id] & kSpecial) != 0) continue;
    out += token_bytes_[id];
  }
  return out;
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  if (const auto it = added_by_content_.find(std::string(token)); it != added_by_content_.end())
    return added_[it->second].id;
  return model_.token_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  for (const AddedToken& token : added_)
    if (token.id == id) return token.content;
  if (const std::string* token = model_.token(id)) return *token;
  return std::nullopt;
}

}  // namespace hiq
