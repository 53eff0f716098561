// tokenizer/chat_template.h — how a conversation becomes the text that is
// tokenized: the model's own Hugging Face chat template (Jinja), rendered by
// template/jinja.h exactly as transformers' apply_chat_template renders it,
// or the built-in ChatML for model directories that have none.
//
// Where the template comes from (as transformers looks for it):
//   1. <model_dir>/chat_template.jinja;
//   2. tokenizer_config.json's "chat_template": a string, or a list of
//      {"name", "template"} entries of which "default" is taken;
//   3. a file given with --chat-template (load_file): Jinja text, or a .json
//      file holding "chat_template".
// bos_token and eos_token come from tokenizer_config.json (a string, or an
// AddedToken object {"content": ...}); a token the config lacks or sets to
// null is undefined in the template, as in transformers.
//
// What the template sees (transformers' render call): messages, tools and
// documents (None unless the request gives them), add_generation_prompt,
// bos_token, eos_token, then the request's extra variables
// (chat_template_kwargs such as enable_thinking, tools).
//
// Content is copied as it is: encode(text, parse_special = true) turns a
// "<|im_end|>" typed by a user into the special token, as Hugging Face does
// with the rendered template.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "template/jinja.h"

namespace hiq {

class ChatTemplate {
 public:
  // From a model directory. kNotFound when it has no template (no
  // chat_template.jinja, and no tokenizer_config.json or no "chat_template" in
  // it); kInvalidArgument naming the file and field for a malformed one or a
  // template outside the supported subset.
  static Result<ChatTemplate> load(const std::string& model_dir);
  // From --chat-template's file: Jinja text, or JSON (a .json name) holding
  // "chat_template". Special tokens are read from model_dir's
  // tokenizer_config.json when there is one (model_dir may be empty).
  static Result<ChatTemplate> load_file(const std::string& path, const std::string& model_dir);
  // From template text. An empty bos_token/eos_token leaves that variable
  // undefined, as transformers does for a token the config does not set.
  static Result<ChatTemplate> from_source(std::string source, std::string bos_token, std::string eos_token);
  // The built-in ChatML ("<|im_start|>{role}\n{content}<|im_end|>\n" per
  // message), for model directories without a template.
  static ChatTemplate chatml();

  // messages: an OpenAI-shaped JSON array (role; content as a string or null;
  // optional tool_calls, name, reasoning_content ...). extra: a JSON object of
  // further variables (chat_template_kwargs such as {"enable_thinking": false},
  // "tools"); it may replace tools, documents and the special tokens, not
  // messages or add_generation_prompt. Errors (kInvalidArgument): malformed
  // arguments; the template's raise_exception message as it is; a template
  // error naming the line and construct. kResourceExhausted: a render limit.
  // Safe to call from many threads at once.
  Result<std::string> render(const nlohmann::json& messages, bool add_generation_prompt,
                             const nlohmann::json& extra = nlohmann::json::object()) const;
  // The same for a request parsed as ordered_json: objects keep their key
  // order, so a template printing a tool schema with tojson prints it as the
  // client sent it, as Python does. (nlohmann::json sorts keys when parsing.)
  Result<std::string> render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                             const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  // The template text, for logs and /v1/models.
  const std::string& source() const { return source_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  // Limits and the clock of strftime_now (tests fix the time).
  void set_render_options(jinja::RenderOptions options) { options_ = std::move(options); }

 private:
  template <typename Json>
  Result<std::string> render_json(const Json& messages, bool add_generation_prompt, const Json& extra) const;
  ChatTemplate(jinja::Template compiled, std::string source, std::string bos, std::string eos)
      : template_(std::move(compiled)), source_(std::move(source)), bos_token_(std::move(bos)),
        eos_token_(std::move(eos)) {}

  jinja::Template template_;
  std::string source_;
  std::string bos_token_;
  std::string eos_token_;
  jinja::RenderOptions options_;
};

// ---- ChatML without a template (kept for the current server and its tests;
// ChatTemplate::chatml() renders the same text) ----

// The roles ChatML knows.
enum class ChatRole { kSystem, kUser, kAssistant };

// "system", "user" or "assistant".
std::string_view chat_role_name(ChatRole role);

// The role a request names. Errors (kInvalidArgument): any other name, with
// the name quoted and the accepted ones listed.
Result<ChatRole> parse_chat_role(std::string_view name);

// One turn of a conversation.
struct ChatMessage {
  ChatRole role = ChatRole::kUser;  // who speaks
  std::string content;              // what they say, as UTF-8 text
};

// "<|im_start|>{role}\n{content}<|im_end|>\n" per message, then
// "<|im_start|>assistant\n" when add_generation_prompt.
std::string apply_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt);

}  // namespace hiq
