#include "kv/config_reader.h"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include <nlohmann/json.hpp>

namespace hiq {

using nlohmann::json;

Result<ConfigFile> read_config_file(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path file(path);
  std::error_code ec;
  if (fs::is_directory(file, ec)) {
    file /= "config.json";
    if (!fs::exists(file, ec)) return not_found(path + ": a directory without config.json");
  }
  const fs::file_status status = fs::status(file, ec);
  if (ec || !fs::exists(status)) return not_found(file.string() + ": no such file");
  if (fs::is_directory(status)) return invalid_argument(file.string() + ": is a directory, not a config.json file");
  if (!fs::is_regular_file(status)) return invalid_argument(file.string() + ": is not a regular file");
  constexpr uintmax_t kMaxConfigBytes = 16u << 20;
  const uintmax_t size = fs::file_size(file, ec);
  if (ec) return data_loss(file.string() + ": cannot read its size: " + ec.message());
  if (size > kMaxConfigBytes)
    return invalid_argument(file.string() + ": " + std::to_string(size) + " bytes is too large for a config.json");
  std::ifstream in(file, std::ios::binary);
  if (!in) return not_found(file.string() + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return data_loss(file.string() + ": read failed");
  return ConfigFile{file.string(), text.str()};
}

ConfigReader::ConfigReader(const json& object, std::string_view source, std::string_view prefix)
    : object_(object), source_(source), prefix_(prefix) {}

Status config_field_error(std::string_view source, std::string_view field, std::string_view problem) {
  return invalid_argument(std::string(source) + ": field '" + std::string(field) + "' " + std::string(problem));
}

Status ConfigReader::error(std::string_view field, std::string_view problem) const {
  return config_field_error(source_, prefix_ + std::string(field), problem);
}

bool ConfigReader::has(std::string_view field) const {
  if (!object_.is_object()) return false;
  auto it = object_.find(field);
  return it != object_.end() && !it->is_null();
}

Result<int> ConfigReader::positive_int(std::string_view field) const {
  if (!has(field)) return error(field, "is missing");
  const json& v = *object_.find(field);
  if (!v.is_number_integer()) return error(field, "must be an integer (got " + describe_json_value(v) + ")");
  // A value above INT64_MAX is stored unsigned; it is out of range either way.
  if (v.is_number_unsigned() && v.get<uint64_t>() > (uint64_t{1} << 24))
    return error(field, "must be a positive integer of at most 2^24 (got " + describe_json_value(v) + ")");
  const auto n = v.get<int64_t>();
  if (n <= 0 || n > (1 << 24))
    return error(field, "must be a positive integer of at most 2^24 (got " + describe_json_value(v) + ")");
  return static_cast<int>(n);
}

Result<int> ConfigReader::optional_positive_int(std::string_view field, int fallback) const {
  if (!has(field)) return fallback;
  return positive_int(field);
}

Result<std::string> ConfigReader::string(std::string_view field) const {
  if (!has(field)) return error(field, "is missing");
  const json& v = *object_.find(field);
  if (!v.is_string()) return error(field, "must be a string (got " + describe_json_value(v) + ")");
  return v.get<std::string>();
}

Result<std::string> ConfigReader::optional_string(std::string_view field, std::string fallback) const {
  if (!has(field)) return fallback;
  return string(field);
}

Result<double> ConfigReader::number(std::string_view field) const {
  if (!has(field)) return error(field, "is missing");
  const json& v = *object_.find(field);
  if (!v.is_number()) return error(field, "must be a number (got " + describe_json_value(v) + ")");
  const auto x = v.get<double>();
  if (!std::isfinite(x)) return error(field, "must be finite (got " + describe_json_value(v) + ")");
  return x;
}

Result<double> ConfigReader::optional_number(std::string_view field, double fallback) const {
  if (!has(field)) return fallback;
  return number(field);
}

Result<bool> ConfigReader::optional_bool(std::string_view field, bool fallback) const {
  if (!has(field)) return fallback;
  const json& v = *object_.find(field);
  if (!v.is_boolean()) return error(field, "must be true or false (got " + describe_json_value(v) + ")");
  return v.get<bool>();
}

}  // namespace hiq
