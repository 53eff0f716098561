#include "tokenizer/chat_template.h"

#include "model/strict_json.h"

namespace hiq {

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
