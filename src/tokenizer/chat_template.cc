#include "tokenizer/chat_template.h"

#include <filesystem>
#include <fstream>
#include <optional>

#include "core/json_input.h"

namespace hiq {
namespace {

constexpr uintmax_t kMaxFileBytes = 64u << 20;  // tokenizer_config.json with its added tokens is a few MiB at most
constexpr int kMaxNesting = 64;

// The ChatML template that transformers used as its default.
constexpr std::string_view kChatmlSource =
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// Reads a whole file. kNotFound when it does not exist.
Result<std::string> read_file(const std::filesystem::path& file) {
  const std::string name = file.string();
  std::error_code ec;
  const auto status = std::filesystem::status(file, ec);
  if (!std::filesystem::exists(status)) return not_found(name + ": no such file");
  if (!std::filesystem::is_regular_file(status)) return invalid_argument(name + ": not a regular file");
  const uintmax_t size = std::filesystem::file_size(file, ec);
  if (ec) return data_loss(name + ": cannot read its size: " + ec.message());
  if (size > kMaxFileBytes) return invalid_argument(name + ": " + std::to_string(size) + " bytes is too large");
  std::ifstream in(file, std::ios::binary);
  std::string text(static_cast<size_t>(size), '\0');
  if (!in || !in.read(text.data(), static_cast<std::streamsize>(size))) return data_loss(name + ": reading failed");
  return text;
}

Result<nlohmann::json> read_json_object(const std::filesystem::path& file) {
  HIQ_ASSIGN_OR_RETURN(const std::string text, read_file(file));
  Result<nlohmann::json> root = parse_strict_json(text, file.string(), kMaxNesting);
  if (!root.is_ok()) return invalid_argument(root.status().message());
  if (!root->is_object()) return invalid_argument(file.string() + ": not a JSON object");
  return root;
}

// "chat_template" of a config: a string, or [{"name", "template"}] with a
// "default". nullopt when the field is absent or null.
Result<std::optional<std::string>> template_field(const nlohmann::json& root, const std::string& file) {
  const auto it = root.find("chat_template");
  if (it == root.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (!it->is_array())
    return invalid_argument(file + ": field 'chat_template' must be a string or a list of {\"name\", \"template\"}");
  std::string names;
  for (size_t i = 0; i < it->size(); ++i) {
    const nlohmann::json& entry = (*it)[i];
    const std::string where = file + ": field 'chat_template[" + std::to_string(i) + "]'";
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() || !entry.contains("template") ||
        !entry["template"].is_string())
      return invalid_argument(where + " must be an object with string fields 'name' and 'template'");
    const std::string name = entry["name"].get<std::string>();
    if (name == "default") return std::optional<std::string>(entry["template"].get<std::string>());
    names += (names.empty() ? "" : ", ") + quote_for_message(name);
  }
  return invalid_argument(file + ": field 'chat_template' names no \"default\" template (it has: " +
                          (names.empty() ? std::string("none") : names) + ")");
}

// bos_token / eos_token: a string, an AddedToken object, or null/absent ("").
Result<std::string> token_field(const nlohmann::json& root, const std::string& field, const std::string& file) {
  const auto it = root.find(field);
  if (it == root.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    const auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return invalid_argument(file + ": field '" + field + "' must be a string or an object with a string 'content'");
}

struct SpecialTokens {
  std::string bos, eos;
};

Result<SpecialTokens> special_tokens(const nlohmann::json& config, const std::string& file) {
  SpecialTokens tokens;
  HIQ_ASSIGN_OR_RETURN(tokens.bos, token_field(config, "bos_token", file));
  HIQ_ASSIGN_OR_RETURN(tokens.eos, token_field(config, "eos_token", file));
  return tokens;
}

// The special tokens of model_dir's tokenizer_config.json, or none when it has none.
Result<SpecialTokens> special_tokens_of_dir(const std::string& model_dir) {
  if (model_dir.empty()) return SpecialTokens{};
  const std::filesystem::path file = std::filesystem::path(model_dir) / "tokenizer_config.json";
  Result<nlohmann::json> config = read_json_object(file);
  if (!config.is_ok()) {
    if (config.status().code() == StatusCode::kNotFound) return SpecialTokens{};
    return config.status();
  }
  return special_tokens(*config, file.string());
}

Result<ChatTemplate> compile(std::string source, SpecialTokens tokens, const std::string& origin) {
  Result<ChatTemplate> t = ChatTemplate::from_source(std::move(source), std::move(tokens.bos), std::move(tokens.eos));
  if (!t.is_ok()) return t.status().with_context(origin);
  return t;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::from_source(std::string source, std::string bos_token, std::string eos_token) {
  HIQ_ASSIGN_OR_RETURN(jinja::Template compiled, jinja::Template::parse(source));
  return ChatTemplate(std::move(compiled), std::move(source), std::move(bos_token), std::move(eos_token));
}

ChatTemplate ChatTemplate::chatml() {
  Result<ChatTemplate> t = from_source(std::string(kChatmlSource), "", "<|im_end|>");
  HIQ_CHECK_MSG(t.is_ok(), "the built-in ChatML template must parse");
  return std::move(t).value();
}

Result<ChatTemplate> ChatTemplate::load(const std::string& model_dir) {
  const std::filesystem::path dir(model_dir);
  const std::filesystem::path config_file = dir / "tokenizer_config.json";
  Result<nlohmann::json> config = read_json_object(config_file);
  if (!config.is_ok() && config.status().code() != StatusCode::kNotFound) return config.status();
  SpecialTokens tokens;
  if (config.is_ok()) {
    HIQ_ASSIGN_OR_RETURN(tokens, special_tokens(*config, config_file.string()));
  }

  const std::filesystem::path jinja_file = dir / "chat_template.jinja";
  Result<std::string> text = read_file(jinja_file);
  if (text.is_ok()) return compile(std::move(text).value(), std::move(tokens), jinja_file.string());
  if (text.status().code() != StatusCode::kNotFound) return text.status();

  if (!config.is_ok())
    return not_found(model_dir + ": no chat template (neither chat_template.jinja nor tokenizer_config.json)");
  HIQ_ASSIGN_OR_RETURN(std::optional<std::string> source, template_field(*config, config_file.string()));
  if (!source) return not_found(config_file.string() + ": no field 'chat_template', and no chat_template.jinja");
  return compile(std::move(*source), std::move(tokens), config_file.string() + ": field 'chat_template'");
}

Result<ChatTemplate> ChatTemplate::load_file(const std::string& path, const std::string& model_dir) {
  HIQ_ASSIGN_OR_RETURN(SpecialTokens tokens, special_tokens_of_dir(model_dir));
  const std::filesystem::path file(path);
  if (file.extension() == ".json") {
    HIQ_ASSIGN_OR_RETURN(const nlohmann::json root, read_json_object(file));
    HIQ_ASSIGN_OR_RETURN(std::optional<std::string> source, template_field(root, path));
    if (!source) return invalid_argument(path + ": no field 'chat_template'");
    return compile(std::move(*source), std::move(tokens), path + ": field 'chat_template'");
  }
  HIQ_ASSIGN_OR_RETURN(std::string text, read_file(file));
  return compile(std::move(text), std::move(tokens), path);
}

Result<std::string> ChatTemplate::render(const nlohmann::json& messages, bool add_generation_prompt,
                                         const nlohmann::json& extra) const {
  return render_json(messages, add_generation_prompt, extra);
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                         const nlohmann::ordered_json& extra) const {
  return render_json(messages, add_generation_prompt, extra);
}

template <typename Json>
Result<std::string> ChatTemplate::render_json(const Json& messages, bool add_generation_prompt,
                                              const Json& extra) const {
  if (!messages.is_array()) return invalid_argument("chat template: messages must be a JSON array");
  if (!extra.is_object()) return invalid_argument("chat template: the extra variables must be a JSON object");
  Json context = Json::object();
  context["messages"] = messages;
  context["tools"] = nullptr;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  if (!bos_token_.empty()) context["bos_token"] = bos_token_;
  if (!eos_token_.empty()) context["eos_token"] = eos_token_;
  for (const auto& [key, value] : extra.items()) {
    if (key == "messages" || key == "add_generation_prompt")
      return invalid_argument("chat template: the extra variables may not set '" + key + "'");
    context[key] = value;
  }
  return template_.render(context, options_);
}

// ---- ChatML without a template ----

std::string_view chat_role_name(ChatRole role) {
  switch (role) {
    case ChatRole::kSystem: return "system";
    case ChatRole::kUser: return "user";
    case ChatRole::kAssistant: return "assistant";
  }
  return "unknown";
}

Result<ChatRole> parse_chat_role(std::string_view name) {
  for (ChatRole role : {ChatRole::kSystem, ChatRole::kUser, ChatRole::kAssistant})
    if (name == chat_role_name(role)) return role;
  return invalid_argument("chat message role " + quote_for_message(name) +
                          " is not supported; the roles are system, user and assistant");
}

std::string apply_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  std::string text;
  for (const ChatMessage& message : messages) {
    text += "<|im_start|>";
    text += chat_role_name(message.role);
    text += '\n';
    text += message.content;
    text += "<|im_end|>\n";
  }
  if (add_generation_prompt) text += "<|im_start|>assistant\n";
  return text;
}

}  // namespace hiq
