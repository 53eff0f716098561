#include "tokenizer/pre_tokenizer.h"

#include <string>

#include <nlohmann/json.hpp>

#include "kv/config_reader.h"
#include "core/json_input.h"
#include "tokenizer/json_fields.h"

namespace hiq {
namespace {

using nlohmann::json;

Result<std::string> step_type(const json& step, const std::string& path) {
  if (!step.is_object()) return field_error(path, "must be an object (got " + describe_json_value(step) + ")");
  const std::string type = type_of(step);
  if (type.empty()) return field_error(path + ".type", "must be a string naming the pre-tokenizer");
  return type;
}

Result<RegexSplitter> read_split(const json& step, const std::string& path) {
  const auto pattern = step.find("pattern");
  if (pattern == step.end() || !pattern->is_object() || pattern->size() != 1)
    return field_error(path + ".pattern", "must be {\"Regex\": ...} or {\"String\": ...}");
  const std::string& kind = pattern->begin().key();
  const json& text = pattern->begin().value();
  if ((kind != "Regex" && kind != "String") || !text.is_string())
    return field_error(path + ".pattern", "must be {\"Regex\": \"...\"} or {\"String\": \"...\"} (got key " +
                                              quote_for_message(kind) + ")");
  const auto behavior = step.find("behavior");
  if (behavior == step.end() || !behavior->is_string() || behavior->get<std::string>() != "Isolated")
    return field_error(path + ".behavior",
                       "must be \"Isolated\" (got " +
                           (behavior == step.end() ? std::string("nothing") : describe_json_value(*behavior)) +
                           "); other split behaviors are not supported");
  HIQ_ASSIGN_OR_RETURN(const bool invert, optional_bool(step, "invert", false, path));
  if (invert) return field_error(path + ".invert", "is true; only invert: false is supported");
  return RegexSplitter::compile(text.get<std::string>(), kind == "String", path + ".pattern." + kind);
}

}  // namespace

Result<PreTokenizer> PreTokenizer::from_json(const json& value) {
  const std::string root = "pre_tokenizer";
  if (value.is_null())
    return field_error(root, "is null; a byte-level BPE needs a ByteLevel pre-tokenizer");
  HIQ_ASSIGN_OR_RETURN(const std::string root_type, step_type(value, root));

  // The steps as a list, with their paths for messages.
  std::vector<std::pair<const json*, std::string>> steps;
  if (root_type == "Sequence") {
    const auto list = value.find("pretokenizers");
    if (list == value.end() || !list->is_array() || list->empty())
      return field_error(root + ".pretokenizers", "must be a non-empty array of pre-tokenizers");
    for (size_t i = 0; i < list->size(); ++i)
      steps.emplace_back(&(*list)[i], root + ".pretokenizers[" + std::to_string(i) + "]");
  } else {
    steps.emplace_back(&value, root);
  }

  PreTokenizer pre;
  bool byte_level_seen = false;
  for (const auto& [step, path] : steps) {
    HIQ_ASSIGN_OR_RETURN(const std::string type, step_type(*step, path));
    if (byte_level_seen)
      return field_error(path, "follows the ByteLevel step; ByteLevel must be the last pre-tokenizer");
    if (type == "Split") {
      HIQ_ASSIGN_OR_RETURN(RegexSplitter split, read_split(*step, path));
      pre.splits_.push_back(std::move(split));
    } else if (type == "ByteLevel") {
      byte_level_seen = true;
      if (!step->contains("add_prefix_space")) return field_error(path + ".add_prefix_space", "is missing");
      HIQ_ASSIGN_OR_RETURN(pre.add_prefix_space_, optional_bool(*step, "add_prefix_space", false, path));
      HIQ_ASSIGN_OR_RETURN(const bool use_regex, optional_bool(*step, "use_regex", true, path));
      if (use_regex) {
        HIQ_ASSIGN_OR_RETURN(RegexSplitter gpt2, RegexSplitter::compile(kGpt2SplitPattern, false, path));
        pre.byte_level_regex_ = std::move(gpt2);
      }
    } else {
      return field_error(path + ".type", "is " + quote_for_message(type) +
                                             "; supported: ByteLevel, or a Sequence of Split (Isolated) steps "
                                             "ending in ByteLevel");
    }
  }
  if (!byte_level_seen)
    return field_error(root, "has no ByteLevel step; a byte-level BPE needs one, last");
  return pre;
}

Status PreTokenizer::for_each_word(std::string_view text, const std::function<Status(std::string_view)>& word) const {
  if (text.empty()) return Status::ok();
  // One matcher state per regex step: stage k's loop is still running while
  // stage k + 1 splits its pieces.
  std::vector<RegexSplitter::Scratch> scratch(splits_.size() + 1);
  return run(0, text, scratch, word);
}

Status PreTokenizer::run(size_t stage, std::string_view text, std::vector<RegexSplitter::Scratch>& scratch,
                         const std::function<Status(std::string_view)>& word) const {
  if (stage < splits_.size()) {
    return splits_[stage].split(text, scratch[stage],
                                [&](std::string_view piece) { return run(stage + 1, piece, scratch, word); });
  }
  // The ByteLevel step.
  std::string prefixed;
  if (add_prefix_space_ && !text.starts_with(' ')) {
    prefixed.reserve(text.size() + 1);
    prefixed += ' ';
    prefixed += text;
    text = prefixed;
  }
  if (byte_level_regex_) return byte_level_regex_->split(text, scratch[stage], word);
  return word(text);
}

}  // namespace hiq
