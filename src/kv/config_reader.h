// kv/config_reader.h — typed, checked access to the fields of one JSON object
// of a Hugging Face config.json, for the one config.json parser
// (kv/hf_config.cc). Its errors read "<source>: field '<name>' <problem>";
// consumers of the parsed HfConfig word theirs alike with config_field_error.
//
// Includers need nlohmann_json (the header only forward-declares it).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "core/json_input.h"
#include "core/status.h"

namespace hiq {

// The text of a config.json and the path it was read from (for errors).
struct ConfigFile {
  std::string path;
  std::string text;
};

// Reads a config.json file, or the config.json of a model directory. Errors:
// kNotFound for a missing file, kInvalidArgument for a directory, a special
// file or one over 16 MiB (real configs are a few KB), kDataLoss when reading fails.
Result<ConfigFile> read_config_file(const std::string& path);

// invalid_argument("<source>: field '<field>' <problem>").
Status config_field_error(std::string_view source, std::string_view field, std::string_view problem);

class ConfigReader {
 public:
  // `object` must outlive the reader. `source` names the file (or preset) in
  // errors; `prefix` is written before field names, for nested objects
  // ("rope_scaling." gives "field 'rope_scaling.factor'").
  ConfigReader(const nlohmann::json& object, std::string_view source, std::string_view prefix = "");

  // invalid_argument("<source>: field '<prefix><field>' <problem>").
  Status error(std::string_view field, std::string_view problem) const;

  // Present and not null: transformers writes absent optional fields as null.
  bool has(std::string_view field) const;

  // An integer in [1, 2^24]: every count or size in a config fits easily.
  Result<int> positive_int(std::string_view field) const;
  Result<int> optional_positive_int(std::string_view field, int fallback) const;
  Result<std::string> string(std::string_view field) const;
  Result<std::string> optional_string(std::string_view field, std::string fallback) const;
  // Any finite JSON number (an integer is taken as its value).
  Result<double> number(std::string_view field) const;
  Result<double> optional_number(std::string_view field, double fallback) const;
  Result<bool> optional_bool(std::string_view field, bool fallback) const;

  const std::string& source() const { return source_; }

 private:
  const nlohmann::json& object_;
  std::string source_;
  std::string prefix_;
};

}  // namespace hiq
