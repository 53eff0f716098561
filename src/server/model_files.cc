#include "server/model_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "core/json_input.h"
#include "tokenizer/tokenizer.h"

namespace hiq {
namespace {

using nlohmann::json;

// The JSON object of DIR/NAME (a small file: at most 16 MiB); null when the
// file does not exist.
Result<json> read_json(const std::string& dir, const char* name) {
  const std::filesystem::path path = std::filesystem::path(dir) / name;
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return json();
  constexpr uintmax_t kMaxBytes = 16 << 20;
  const uintmax_t size = std::filesystem::file_size(path, error);
  if (error || !std::filesystem::is_regular_file(path)) return invalid_argument(path.string() + ": not a readable file");
  if (size > kMaxBytes) return invalid_argument(path.string() + ": larger than 16 MiB");
  std::ifstream in(path, std::ios::binary);
  std::string text(static_cast<size_t>(size), '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(size))) return invalid_argument(path.string() + ": cannot be read");
  Result<json> j = parse_strict_json(text, path.string(), /*max_nesting=*/64);
  if (!j.is_ok()) return invalid_argument(j.status().message());
  if (!j->is_object()) return invalid_argument(path.string() + ": not a JSON object");
  return j;
}

Status field_error(const std::string& dir, const char* file, const std::string& field, const std::string& problem) {
  return invalid_argument((std::filesystem::path(dir) / file).string() + ": field '" + field + "' " + problem);
}

// A token given as a string or as {"content": "..."} (an AddedToken), or null.
std::optional<std::string> token_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

void append_unique(std::vector<int32_t>& ids, int32_t id) {
  if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
}

}  // namespace

Result<GenerationConfig> read_generation_config(const std::string& dir, const Tokenizer* tokenizer) {
  GenerationConfig config;
  HIQ_ASSIGN_OR_RETURN(const json generation, read_json(dir, "generation_config.json"));
  HIQ_ASSIGN_OR_RETURN(const json model, read_json(dir, "config.json"));
  // eos_token_id: generation_config.json's, else config.json's.
  for (const auto& [file, j] : {std::pair<const char*, const json*>{"generation_config.json", &generation},
                                {"config.json", &model}}) {
    if (!j->is_object() || !j->contains("eos_token_id") || (*j)["eos_token_id"].is_null()) continue;
    const json& eos = (*j)["eos_token_id"];
    for (const json& id : eos.is_array() ? eos : json::array({eos})) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
        return field_error(dir, file, "eos_token_id", "must be a token id or a list of them");
      append_unique(config.eos_token_ids, id.get<int32_t>());
    }
    break;
  }
  HIQ_ASSIGN_OR_RETURN(const json tokenizer_config, read_json(dir, "tokenizer_config.json"));
  if (tokenizer != nullptr && tokenizer_config.is_object() && tokenizer_config.contains("eos_token"))
    if (const auto text = token_text(tokenizer_config["eos_token"]))
      if (const auto id = tokenizer->token_id(*text)) append_unique(config.eos_token_ids, *id);

  if (!generation.is_object()) return config;
  const auto number = [&](const char* name) -> Result<std::optional<double>> {
    if (!generation.contains(name) || generation[name].is_null()) return std::optional<double>();
    if (!generation[name].is_number()) return field_error(dir, "generation_config.json", name, "must be a number");
    return std::optional<double>(generation[name].get<double>());
  };
  HIQ_ASSIGN_OR_RETURN(config.temperature, number("temperature"));
  if (config.temperature && !(*config.temperature >= 0.0 && *config.temperature <= 2.0))
    return field_error(dir, "generation_config.json", "temperature", "must be in [0, 2]");
  HIQ_ASSIGN_OR_RETURN(config.top_p, number("top_p"));
  if (config.top_p && !(*config.top_p > 0.0 && *config.top_p <= 1.0))
    return field_error(dir, "generation_config.json", "top_p", "must be in (0, 1]");
  if (generation.contains("top_k") && !generation["top_k"].is_null()) {
    const json& k = generation["top_k"];
    if (!k.is_number_integer() || k.get<int64_t>() < -1 || k.get<int64_t>() > INT32_MAX)
      return field_error(dir, "generation_config.json", "top_k", "must be an integer ≥ -1");
    // transformers' top_k = 0 means "off", as -1 does here.
    config.top_k = k.get<int64_t>() <= 0 ? -1 : static_cast<int>(k.get<int64_t>());
  }
  return config;
}

Result<std::vector<int32_t>> read_prompt_prefix(const std::string& dir, const Tokenizer& tokenizer) {
  if (tokenizer.template_appends())
    return invalid_argument((std::filesystem::path(dir) / "tokenizer.json").string() +
                            ": post_processor appends tokens after the text; such tokenizers are not supported");
  if (!tokenizer.template_prefix().empty()) return tokenizer.template_prefix();
  std::vector<int32_t> prefix;
  // No TemplateProcessing: tokenizer_config.json's add_bos_token, as the slow tokenizers do.
  HIQ_ASSIGN_OR_RETURN(const json config, read_json(dir, "tokenizer_config.json"));
  if (!config.is_object()) return prefix;
  const auto add_bos = config.find("add_bos_token");
  if (add_bos != config.end() && !add_bos->is_null() && !add_bos->is_boolean())
    return field_error(dir, "tokenizer_config.json", "add_bos_token", "must be true or false");
  if (add_bos != config.end() && add_bos->is_boolean() && add_bos->get<bool>() && config.contains("bos_token")) {
    const auto text = token_text(config["bos_token"]);
    const auto id = text ? tokenizer.token_id(*text) : std::nullopt;
    if (!id) return field_error(dir, "tokenizer_config.json", "bos_token", "names no token of the tokenizer");
    prefix.push_back(*id);
  }
  return prefix;
}

Result<std::string> model_identity(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files = {fs::path(dir) / "config.json"};
  std::vector<fs::path> weights;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().extension() == ".safetensors") weights.push_back(entry.path());
  if (ec) return not_found("model identity: cannot list " + dir + ": " + ec.message());
  std::sort(weights.begin(), weights.end());
  files.insert(files.end(), weights.begin(), weights.end());

  struct StateFree {
    void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
  };
  std::unique_ptr<XXH3_state_t, StateFree> state(XXH3_createState());
  if (!state || XXH3_64bits_reset(state.get()) != XXH_OK) return internal_error("model identity: xxhash failed");
  std::vector<char> buffer(size_t{8} << 20);
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) return not_found("model identity: cannot read " + file.string());
    const std::string name = file.filename().string();
    const uint64_t size = fs::file_size(file, ec);
    if (ec) return not_found("model identity: cannot read " + file.string() + ": " + ec.message());
    (void)XXH3_64bits_update(state.get(), name.data(), name.size());
    (void)XXH3_64bits_update(state.get(), &size, sizeof(size));
    uint64_t read = 0;
    while (in) {
      in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      const auto got = static_cast<size_t>(in.gcount());
      (void)XXH3_64bits_update(state.get(), buffer.data(), got);
      read += got;
    }
    if (read != size) return data_loss("model identity: " + file.string() + " changed or could not be read whole");
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(XXH3_64bits_digest(state.get())));
  return "xxh3:" + std::string(hex);
}

}  // namespace hiq
