#include "tokenizer/json_fields.h"

#include <nlohmann/json.hpp>

#include "kv/config_reader.h"

namespace hiq {

using nlohmann::json;

Status field_error(std::string_view field, std::string_view problem) {
  return invalid_argument("field '" + std::string(field) + "' " + std::string(problem));
}

std::string member_path(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : std::string(path) + "." + std::string(key);
}

const json& member_or_null(const json& object, std::string_view key) {
  static const json kNull;
  if (!object.is_object()) return kNull;
  const auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

std::string type_of(const json& value) {
  const json& type = member_or_null(value, "type");
  return type.is_string() ? type.get<std::string>() : std::string();
}

Result<bool> optional_bool(const json& object, std::string_view key, bool fallback, std::string_view path) {
  const json& value = member_or_null(object, key);
  if (value.is_null()) return fallback;
  if (!value.is_boolean())
    return field_error(member_path(path, key), "must be true or false (got " + describe_json_value(value) + ")");
  return value.get<bool>();
}

Result<std::string> required_string(const json& object, std::string_view key, std::string_view path) {
  const json& value = member_or_null(object, key);
  if (value.is_null()) return field_error(member_path(path, key), "is missing");
  if (!value.is_string())
    return field_error(member_path(path, key), "must be a string (got " + describe_json_value(value) + ")");
  return value.get<std::string>();
}

}  // namespace hiq
