// fuzz/openai_request_fuzz.cc — libFuzzer target of the OpenAI request
// parsers (server/openai.h). Any body must either be refused with a 4xx whose
// error body is valid JSON, or yield a request whose promises hold: one
// non-empty prompt (or at least one message), every value within the range
// the parser documents and within ProtocolLimits. The same bytes are then
// used as generated text: fed to a StopMatcher in two pieces and written into
// a response and a stream chunk, which must stay valid JSON whatever the
// bytes (invalid UTF-8 included). A broken promise traps, so the fuzzer
// reports it like a crash. Built with HIQ_FUZZ=ON (clang); see docs/server.md.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/openai.h"
#include "server/stop_matcher.h"

namespace {

void require(bool promise) {
  if (!promise) __builtin_trap();
}

hiq::openai::ProtocolLimits fuzz_limits() {
  hiq::openai::ProtocolLimits limits;
  limits.max_body_bytes = 4096;
  limits.max_json_depth = 16;
  limits.max_prompt_bytes = 512;
  limits.max_prompt_tokens = 64;
  limits.vocab_size = 1000;
  limits.max_messages = 8;
  limits.max_max_tokens = 100;
  limits.default_chat_max_tokens = 50;
  limits.max_stop_bytes = 16;
  limits.max_stop_token_ids = 4;
  limits.served_model = "m";
  return limits;
}

void check_params(const hiq::openai::GenerationParams& p, const hiq::openai::ProtocolLimits& limits) {
  require(p.max_tokens >= 1 && p.max_tokens <= limits.max_max_tokens);
  require(p.temperature >= 0 && p.temperature <= 2);
  require(p.top_p > 0 && p.top_p <= 1);
  require(p.top_k == -1 || p.top_k >= 1);
  require(p.stop.size() <= 4);
  for (const std::string& s : p.stop) require(!s.empty() && s.size() <= limits.max_stop_bytes);
  require(p.stop_token_ids.size() <= static_cast<size_t>(limits.max_stop_token_ids));
  for (int32_t id : p.stop_token_ids) require(id >= 0 && id < limits.vocab_size);
  require(!p.include_usage || p.stream);
}

void check_refusal(const hiq::Status& status) {
  const hiq::openai::ProtocolError e = hiq::openai::protocol_error(status);
  require(e.http_status == 400 || e.http_status == 404);  // a 500 means the parser has a bug
  require(nlohmann::json::accept(hiq::openai::error_body(e)));
}

bool is_json_event(const std::string& event) {
  return event.starts_with("data: ") && event.ends_with("\n\n") &&
         nlohmann::json::accept(std::string_view(event).substr(6, event.size() - 8));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const hiq::openai::ProtocolLimits limits = fuzz_limits();
  const std::string_view body(reinterpret_cast<const char*>(data), size);

  const auto completion = hiq::openai::parse_completion_request(body, limits);
  if (completion.is_ok()) {
    require(completion->prompt_text.empty() != completion->prompt_token_ids.empty());
    require(completion->prompt_text.size() <= limits.max_prompt_bytes);
    require(completion->prompt_token_ids.size() <= static_cast<size_t>(limits.max_prompt_tokens));
    for (int32_t id : completion->prompt_token_ids) require(id >= 0 && id < limits.vocab_size);
    require(completion->model == limits.served_model);
    check_params(completion->params, limits);
  } else {
    check_refusal(completion.status());
  }

  const auto chat = hiq::openai::parse_chat_request(body, limits);
  if (chat.is_ok()) {
    require(!chat->messages.empty() && chat->messages.size() <= static_cast<size_t>(limits.max_messages));
    size_t bytes = 0;
    for (const hiq::openai::ChatMessage& m : chat->messages) bytes += m.content.size();
    require(bytes <= limits.max_prompt_bytes);
    check_params(chat->params, limits);
  } else {
    check_refusal(chat.status());
  }

  // The bytes as generated text.
  hiq::StopMatcher matcher({"\n\n", "ab", "</s>"});
  const size_t cut = size / 2;
  std::string released = matcher.feed(body.substr(0, cut)).text;
  const auto second = matcher.feed(body.substr(cut));
  released += second.text;
  if (!second.stopped) released += matcher.finish();
  require(released.size() <= size);
  require(std::string_view(body).starts_with(released));
  if (!matcher.stopped()) require(released.size() == size);

  hiq::openai::StreamContext stream;
  stream.meta = {.id = "cmpl-fuzz", .model = "m", .created = 1};
  hiq::openai::Choice choice;
  choice.text = body;
  require(nlohmann::json::accept(hiq::openai::chat_response(stream.meta, choice, {})));
  require(is_json_event(hiq::openai::completion_chunk(stream, body)));
  return 0;
}
