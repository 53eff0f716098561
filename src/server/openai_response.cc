// The response half of server/openai.h: error bodies and the Status → HTTP
// mapping, whole responses, stream chunks, log-probabilities and the
// tokenizer endpoints' bodies. Request parsing is in openai_request.cc.
#include <cmath>
#include <utility>

#include <nlohmann/json.hpp>

#include "server/openai.h"

namespace hiq::openai {
namespace {

using nlohmann::ordered_json;

// Invalid UTF-8 (a token that ends mid-character) becomes U+FFFD instead of throwing.
std::string dump(const ordered_json& j) { return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace); }

std::string sse(const ordered_json& j) { return "data: " + dump(j) + "\n\n"; }

ordered_json usage_json(const Usage& u) {
  ordered_json j;
  j["prompt_tokens"] = u.prompt_tokens;
  j["completion_tokens"] = u.completion_tokens;
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  j["prompt_tokens_details"] = {
      {"cached_tokens", u.cached_tokens_device + u.cached_tokens_host + u.cached_tokens_storage}};
  ordered_json tiers;
  tiers["device"] = u.cached_tokens_device;
  tiers["host"] = u.cached_tokens_host;
  if (u.cached_tokens_storage > 0) tiers["storage"] = u.cached_tokens_storage;
  j["hiq_cached_tokens_by_tier"] = std::move(tiers);
  return j;
}

ordered_json header(const ResponseMeta& meta, std::string_view object) {
  ordered_json j;
  j["id"] = meta.id;
  j["object"] = object;
  j["created"] = meta.created;
  j["model"] = meta.model;
  return j;
}

ordered_json finish_json(std::optional<FinishReason> finish) {
  return finish ? ordered_json(finish_reason_name(*finish)) : ordered_json(nullptr);
}

// OpenAI writes an impossible token's log-probability as -9999.0; JSON has no -inf.
double wire_logprob(float logprob) { return std::isfinite(logprob) ? static_cast<double>(logprob) : -9999.0; }

// The characters a client sees of a token: its bytes, each invalid sequence
// shown as one U+FFFD (the JSON writer's replacement).
size_t shown_characters(const std::string& bytes) {
  const std::string text = ordered_json::parse(dump(ordered_json(bytes))).get<std::string>();
  size_t n = 0;
  for (const char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace

size_t logprob_text_characters(const std::vector<LogprobEntry>& entries) {
  size_t n = 0;
  for (const LogprobEntry& e : entries) n += shown_characters(e.chosen.token);
  return n;
}

namespace {

// Completions' legacy shape: parallel arrays over the tokens of the text.
ordered_json completion_logprobs(const std::vector<LogprobEntry>& entries, size_t first_offset) {
  ordered_json tokens = ordered_json::array(), logprobs = ordered_json::array(), tops = ordered_json::array(),
               offsets = ordered_json::array();
  size_t offset = first_offset;
  for (const LogprobEntry& e : entries) {
    tokens.push_back(e.chosen.token);
    logprobs.push_back(e.has_logprob ? ordered_json(wire_logprob(e.chosen.logprob)) : ordered_json(nullptr));
    if (!e.has_logprob) {
      tops.push_back(nullptr);
    } else {
      // The sampled token is always among them, as OpenAI's are (up to
      // logprobs + 1 entries): a client may look its own token up.
      ordered_json top = ordered_json::object();
      for (const LogprobToken& t : e.top) top[t.token] = wire_logprob(t.logprob);
      if (!top.contains(e.chosen.token)) top[e.chosen.token] = wire_logprob(e.chosen.logprob);
      tops.push_back(std::move(top));
    }
    offsets.push_back(offset);
    // Offsets count characters of the shown text, as OpenAI's do.
    offset += shown_characters(e.chosen.token);
  }
  ordered_json j;
  j["tokens"] = std::move(tokens);
  j["token_logprobs"] = std::move(logprobs);
  j["top_logprobs"] = std::move(tops);
  j["text_offset"] = std::move(offsets);
  return j;
}

ordered_json chat_token(const LogprobToken& t) {
  ordered_json j;
  j["token"] = t.token;
  j["logprob"] = wire_logprob(t.logprob);
  ordered_json bytes = ordered_json::array();
  for (const char c : t.token) bytes.push_back(static_cast<unsigned char>(c));
  j["bytes"] = std::move(bytes);
  return j;
}

// Chat's shape: {"content": [{"token", "logprob", "bytes", "top_logprobs"}]}.
ordered_json chat_logprobs(const std::vector<LogprobEntry>& entries) {
  ordered_json content = ordered_json::array();
  for (const LogprobEntry& e : entries) {
    ordered_json j = chat_token(e.chosen);
    ordered_json top = ordered_json::array();
    for (const LogprobToken& t : e.top) top.push_back(chat_token(t));
    j["top_logprobs"] = std::move(top);
    content.push_back(std::move(j));
  }
  ordered_json j;
  j["content"] = std::move(content);
  return j;
}

ordered_json logprobs_json(const std::vector<LogprobEntry>* entries, bool chat, size_t first_offset = 0) {
  if (entries == nullptr) return nullptr;
  return chat ? chat_logprobs(*entries) : completion_logprobs(*entries, first_offset);
}

std::string whole_response(const ResponseMeta& meta, std::span<const Choice> choices, const Usage& usage, bool chat) {
  ordered_json j = header(meta, chat ? "chat.completion" : "text_completion");
  ordered_json list = ordered_json::array();
  for (const Choice& choice : choices) {
    ordered_json c;
    c["index"] = choice.index;
    if (chat) {
      ordered_json message;
      message["role"] = "assistant";
      message["content"] = choice.text;
      if (!choice.reasoning_content.empty()) message["reasoning_content"] = choice.reasoning_content;
      c["message"] = std::move(message);
    } else {
      c["text"] = choice.text;
    }
    c["logprobs"] = logprobs_json(choice.logprobs ? &*choice.logprobs : nullptr, chat);
    c["finish_reason"] = finish_reason_name(choice.finish_reason);
    if (choice.token_ids) c["token_ids"] = *choice.token_ids;
    list.push_back(std::move(c));
  }
  j["choices"] = std::move(list);
  j["usage"] = usage_json(usage);
  return dump(j);
}

std::string chunk(const StreamContext& stream, bool chat, ordered_json choice) {
  ordered_json j = header(stream.meta, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = ordered_json::array({std::move(choice)});
  if (stream.include_usage) j["usage"] = nullptr;
  return sse(j);
}

ordered_json chat_choice(size_t index, ordered_json delta, std::optional<FinishReason> finish,
                         const std::vector<LogprobEntry>* logprobs = nullptr) {
  ordered_json c;
  c["index"] = index;
  c["delta"] = std::move(delta);
  c["logprobs"] = logprobs_json(logprobs, /*chat=*/true);
  c["finish_reason"] = finish_json(finish);
  return c;
}

}  // namespace

ProtocolError protocol_error(const Status& status, int resource_exhausted_status) {
  ProtocolError e;
  e.message = status.message();
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kFailedPrecondition:  // not now, in this state (a flush while requests run)
      e.http_status = 400;
      e.type = "invalid_request_error";
      break;
    case StatusCode::kNotFound:
      e.http_status = 404;
      e.type = "invalid_request_error";
      break;
    case StatusCode::kResourceExhausted:
      e.http_status = resource_exhausted_status;
      e.type = resource_exhausted_status == 429 ? "rate_limit_error" : "service_unavailable_error";
      break;
    case StatusCode::kUnavailable:
      e.http_status = 503;
      e.type = "service_unavailable_error";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      if (status.is_ok()) e.message = "internal error: an OK status was reported as an error";
      break;
  }
  constexpr std::string_view kPrefix = "parameter '";
  if (status.message().starts_with(kPrefix)) {
    const size_t end = status.message().find('\'', kPrefix.size());
    if (end != std::string::npos) e.param = status.message().substr(kPrefix.size(), end - kPrefix.size());
  }
  if (e.http_status == 404 && e.param == "model") e.code = "model_not_found";
  if (e.http_status == 400 && status.message().find(kContextLengthExceeded) != std::string::npos)
    e.code = "context_length_exceeded";
  return e;
}

std::string error_body(const ProtocolError& error) {
  ordered_json inner;
  inner["message"] = error.message;
  inner["type"] = error.type;
  inner["param"] = error.param.empty() ? ordered_json(nullptr) : ordered_json(error.param);
  inner["code"] = error.code.empty() ? ordered_json(nullptr) : ordered_json(error.code);
  ordered_json j;
  j["error"] = std::move(inner);
  return dump(j);
}

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
  }
  return "stop";
}

std::string completion_response(const ResponseMeta& meta, std::span<const Choice> choices, const Usage& usage) {
  return whole_response(meta, choices, usage, /*chat=*/false);
}

std::string chat_response(const ResponseMeta& meta, std::span<const Choice> choices, const Usage& usage) {
  return whole_response(meta, choices, usage, /*chat=*/true);
}

std::string completion_response(const ResponseMeta& meta, const Choice& choice, const Usage& usage) {
  return whole_response(meta, std::span(&choice, 1), usage, /*chat=*/false);
}

std::string chat_response(const ResponseMeta& meta, const Choice& choice, const Usage& usage) {
  return whole_response(meta, std::span(&choice, 1), usage, /*chat=*/true);
}

std::string completion_chunk(const StreamContext& stream, std::string_view text, std::optional<FinishReason> finish,
                             const std::vector<int32_t>* token_ids, const ChunkExtras& extras) {
  ordered_json c;
  c["index"] = extras.index;
  c["text"] = text;
  c["logprobs"] = logprobs_json(extras.logprobs, /*chat=*/false, extras.text_offset);
  c["finish_reason"] = finish_json(finish);
  if (token_ids != nullptr) c["token_ids"] = *token_ids;
  return chunk(stream, /*chat=*/false, std::move(c));
}

std::string chat_role_chunk(const StreamContext& stream, size_t index) {
  ordered_json delta;
  delta["role"] = "assistant";
  delta["content"] = "";
  return chunk(stream, /*chat=*/true, chat_choice(index, std::move(delta), std::nullopt));
}

std::string chat_content_chunk(const StreamContext& stream, std::string_view text,
                               const std::vector<int32_t>* token_ids, const ChunkExtras& extras) {
  ordered_json c = chat_choice(extras.index, {{"content", text}}, std::nullopt, extras.logprobs);
  if (token_ids != nullptr) c["token_ids"] = *token_ids;
  return chunk(stream, /*chat=*/true, std::move(c));
}

std::string chat_reasoning_chunk(const StreamContext& stream, std::string_view text, size_t index) {
  return chunk(stream, /*chat=*/true, chat_choice(index, {{"reasoning_content", text}}, std::nullopt));
}

std::string chat_finish_chunk(const StreamContext& stream, FinishReason finish, size_t index) {
  return chunk(stream, /*chat=*/true, chat_choice(index, ordered_json::object(), finish));
}

std::string usage_chunk(const StreamContext& stream, bool chat, const Usage& usage) {
  ordered_json j = header(stream.meta, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = ordered_json::array();
  j["usage"] = usage_json(usage);
  return sse(j);
}

std::string error_event(const ProtocolError& error) { return "data: " + error_body(error) + "\n\n"; }

std::string done_event() { return "data: [DONE]\n\n"; }

std::string tokenize_response(std::span<const int32_t> tokens, size_t max_model_len,
                              const std::vector<std::string>* token_strs) {
  ordered_json j;
  j["tokens"] = std::vector<int32_t>(tokens.begin(), tokens.end());
  j["count"] = tokens.size();
  j["max_model_len"] = max_model_len;
  if (token_strs != nullptr) j["token_strs"] = *token_strs;
  return dump(j);
}

std::string detokenize_response(std::string_view text) {
  ordered_json j;
  j["prompt"] = text;
  j["text"] = text;
  return dump(j);
}

}  // namespace hiq::openai
