// tokenizer/chat_template.h — the chat template of Qwen models (ChatML): how
// a conversation becomes the text that is tokenized.
//
//   <|im_start|>system\nYou are helpful.<|im_end|>\n
//   <|im_start|>user\nHi!<|im_end|>\n
//   <|im_start|>assistant\n            ← with add_generation_prompt
//
// This is the plain ChatML that every Qwen template reduces to for text
// messages. What some Qwen templates add is not done here: Qwen2.5's default
// system message when none is given, tool definitions and tool calls, and
// Qwen3's handling of <think> blocks in earlier assistant turns.
//
// Content is copied as it is: encode(text, parse_special = true) turns a
// "<|im_end|>" typed by a user into the special token, as Hugging Face does
// with the rendered template; a server that must prevent that encodes user
// content with parse_special = false and joins the ids itself.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

namespace hiq {

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

// The conversation in ChatML: "<|im_start|>{role}\n{content}<|im_end|>\n" per
// message, then "<|im_start|>assistant\n" when add_generation_prompt (the
// model writes the assistant's reply after it).
std::string apply_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt);

}  // namespace hiq
