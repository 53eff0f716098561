// tokenizer/json_fields.h — checked access to the members of tokenizer.json,
// shared by the parsers of its parts so that they word errors alike:
// "field 'model.merges[3]' <problem>". The loader prefixes the file name.
//
// Includers need nlohmann_json (the header only forward-declares it).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace hiq {

// invalid_argument("field '<field>' <problem>").
Status field_error(std::string_view field, std::string_view problem);

// "<path>.<key>", or "<key>" at the top level (empty path).
std::string member_path(std::string_view path, std::string_view key);

// The member `key` of `object` (which may be any value), or a null value
// when it is absent or `object` is not an object. Absent and null are the
// same to Hugging Face's reader, and so to ours.
const nlohmann::json& member_or_null(const nlohmann::json& object, std::string_view key);

// The "type" member of an object when it is a string, else "".
std::string type_of(const nlohmann::json& value);

// A boolean member that may be absent or null (`fallback`) but not of another
// type. `path` names `object`.
Result<bool> optional_bool(const nlohmann::json& object, std::string_view key, bool fallback, std::string_view path);

// A string member that must be present.
Result<std::string> required_string(const nlohmann::json& object, std::string_view key, std::string_view path);

}  // namespace hiq
