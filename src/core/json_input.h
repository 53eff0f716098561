// core/json_input.h — the one policy for JSON that comes from outside the
// process: model files (config.json, generation_config.json,
// tokenizer.json, tokenizer_config.json, safetensors headers, shard indexes)
// and request bodies. Every parser of such input goes through here:
//   - nothing throws: nlohmann's non-throwing parse, errors as Status;
//   - nesting is bounded, measured on the raw bytes before any tree is built
//     (a hostile "[[[[…" cannot exhaust the stack or memory);
//   - in files, a key repeated in one object is an error (nlohmann keeps the
//     last silently, and a second entry of one name would hide the first);
//     request bodies follow Python's json instead — the last one wins — as
//     the OpenAI-compatible servers clients are written against do;
//   - names and values from the input are quoted and cut in messages
//     (quote_for_message, describe_json_value), so a megabyte string or a
//     control byte never reaches a log line or an error body whole.
// Field-by-field access stays with each format's reader (kv/config_reader.h,
// tokenizer/json_fields.h, server/openai_request.cc); they word their errors
// with the two helpers below.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace hiq {

// The deepest nesting of objects and arrays in `text`, counting brackets
// outside strings; stops once `limit` is passed.
inline int json_nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

// Parses `text` (a model file) as one JSON value with duplicate keys refused.
// Errors (kDataLoss, prefixed with `source`): invalid JSON; nesting deeper
// than `max_nesting`; a repeated key, called a `top_level_noun` ("tensor")
// when it is a key of the outermost object.
Result<nlohmann::json> parse_strict_json(std::string_view text, std::string_view source, int max_nesting,
                                         std::string_view top_level_noun = "key");

// A name read from the input, for a message: single-quoted, control bytes
// escaped as \xNN, cut after `max_bytes` bytes ("..." marks the cut).
std::string quote_for_message(std::string_view name, size_t max_bytes = 120);

// A short rendering of a JSON value for a message: containers named by kind,
// scalars as JSON cut after 80 characters.
std::string describe_json_value(const nlohmann::json& value);

}  // namespace hiq
