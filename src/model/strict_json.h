// model/strict_json.h — JSON parsing for files that come from outside
// (safetensors headers, shard indexes): no exceptions, no silent duplicates,
// bounded nesting, and names from the file quoted safely in messages.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace hiq {

// Parses `text` as one JSON value. JSON allows an object to repeat a key and
// nlohmann keeps the last silently; here a repeat is an error, because in
// these files a second entry of one name would hide the first. Errors
// (kDataLoss, prefixed with `source`): invalid JSON; nesting deeper than
// `max_nesting`, refused before parsing so a hostile file cannot make the
// parser build a huge tree; a repeated key, called a `top_level_noun`
// ("tensor") when it is a key of the outermost object.
Result<nlohmann::json> parse_strict_json(std::string_view text, std::string_view source, int max_nesting,
                                         std::string_view top_level_noun = "key");

// A name read from a file, for an error message: single-quoted, control bytes
// escaped as \xNN, cut after 120 bytes.
std::string quote_for_message(std::string_view name);

}  // namespace hiq
