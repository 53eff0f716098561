// server/openai.h — the OpenAI-compatible wire protocol of `hiq serve`, as pure
// functions over request bodies and response text: no sockets, no threads,
// no engine. It owns
//   - parsing and validating POST /v1/completions and /v1/chat/completions
//     bodies into CompletionRequest / ChatRequest, under ProtocolLimits;
//   - the error shape ({"error": {message, type, param, code}}) and the
//     mapping from a hiq Status to an HTTP status;
//   - the response bodies, whole (non-streaming) or as server-sent events.
// The HTTP layer (server/http_server.h) calls these and writes the bytes.
// Everything here is in namespace hiq::openai: its ChatMessage and
// FinishReason are the wire's, not the tokenizer's or the scheduler's.
//
// What a request may ask for, in short: one prompt (text or token ids), n
// choices, sampling by temperature / top_p / top_k / seed, up to four stop
// strings, log-probabilities (with alternatives; of the prompt too with
// echo), streaming with an optional usage chunk, and for chat the template's
// own variables (chat_template_kwargs). Everything else a client can send
// falls in two groups. Parameters we know but do not implement (penalties,
// logit_bias, tools, batch prompts, …) are accepted only at their default
// value and otherwise refused with a 400 that names them, so a client never
// gets silently different behaviour.
// Parameters we do not know are ignored, because OpenAI clients send extras
// (user, metadata, vendor fields). docs/server.md lists every field.
//
// Parse errors are Status values (kInvalidArgument for a malformed field,
// kOutOfRange for a value beyond ProtocolLimits, kNotFound for an unknown
// model). A message about one parameter starts with "parameter '<name>'",
// which protocol_error() turns into the error's `param`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace hiq::openai {

// ---- requests ------------------------------------------------------------------------------

struct ProtocolLimits {
  size_t max_body_bytes = 8u << 20;     // a request body larger than this is refused before parsing
  int max_json_depth = 64;              // deepest nesting of objects/arrays in a body (real ones need < 10)
  size_t max_prompt_bytes = 1u << 20;   // UTF-8 bytes of a text prompt, or of all chat message contents together
  int max_prompt_tokens = 32768;        // length of a token-id prompt
  int64_t vocab_size = 0;               // token ids must be below this; 0: only checked to be in [0, 2^31)
  int max_messages = 1024;              // messages in one chat request
  int max_max_tokens = 32768;           // largest max_tokens a request may ask for
  int default_completion_max_tokens = 16;  // /v1/completions without max_tokens (OpenAI's default)
  int default_chat_max_tokens = 32768;  // /v1/chat/completions without max_tokens; the server clips it to the context
  size_t max_stop_bytes = 256;          // longest stop string
  int max_stop_token_ids = 64;          // entries of stop_token_ids
  int max_n = 16;                       // most choices (n) one request may ask for
  int max_completion_logprobs = 20;     // /v1/completions' logprobs (OpenAI allows 5; vLLM 20)
  int max_top_logprobs = 20;            // /v1/chat/completions' top_logprobs (OpenAI's limit)
  std::string served_model;             // a request naming another model is refused (404); empty: any name accepted

  // Errors name the first field out of range.
  Status validate() const;
};

// What both endpoints share: how long to generate, how to sample, when to stop.
// Sampling parameters a request leaves out are filled by the server: from the
// model's generation_config.json where it has them (as SGLang and vLLM do),
// else OpenAI's defaults (temperature 1, top_p 1, top_k off).
struct GenerationParams {
  int max_tokens = 16;                  // tokens to generate at most (≥ 1)
  std::optional<double> temperature;    // [0, 2]; 0: greedy
  std::optional<double> top_p;          // (0, 1]
  std::optional<int> top_k;             // -1: all tokens; otherwise ≥ 1 (vLLM/SGLang extension)
  std::optional<uint64_t> seed;         // absent: the server draws one
  int n = 1;                            // choices to generate, each with its own random stream
  // -1: no log-probabilities; k ≥ 0: each generated token's, with the k most
  // likely alternatives (completions: "logprobs": k; chat: "logprobs": true
  // with "top_logprobs": k).
  int logprobs = -1;
  std::vector<std::string> stop;        // at most 4 non-empty strings; output ends before the first match
  std::vector<int32_t> stop_token_ids;  // generating one of these ends the request (vLLM/SGLang extension)
  bool ignore_eos = false;              // keep generating past end-of-sequence (SGLang/vLLM extension, bench_serving)
  bool stream = false;                  // answer with server-sent events
  bool include_usage = false;           // stream_options.include_usage: a usage chunk before [DONE]
};

// POST /v1/completions. Exactly one of prompt_text / prompt_token_ids is non-empty.
struct CompletionRequest {
  std::string model;                    // as sent, or ProtocolLimits::served_model when absent
  std::string prompt_text;              // "prompt": "..." or ["..."]
  std::vector<int32_t> prompt_token_ids;  // "prompt": [1, 2, 3] or [[1, 2, 3]]
  GenerationParams params;
  bool echo = false;                    // the prompt comes back before the generated text (with its logprobs, if asked)
  bool add_special_tokens = true;       // a text prompt gets the tokenizer's BOS, as Hugging Face adds it (vLLM extension)

  bool prompt_is_tokens() const { return !prompt_token_ids.empty(); }
};

// POST /v1/chat/completions. The chat template is applied by the caller.
struct ChatRequest {
  std::string model;                    // as sent, or ProtocolLimits::served_model when absent
  // At least one message, as the template reads them: objects with "role"
  // (system, user or assistant; "developer" becomes "system") and "content"
  // (a string: text parts are joined with "\n", as vLLM does), and
  // "reasoning_content" and "name" where the client sent them.
  // Key order as sent (a template's tojson prints it), hence ordered_json.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  GenerationParams params;
  bool add_generation_prompt = true;    // end the prompt with the assistant's header (vLLM extension)
  // Variables for the template (SGLang's and vLLM's chat_template_kwargs),
  // e.g. {"enable_thinking": false} for Qwen3; an object.
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
};

// POST /tokenize: text, or a conversation through the chat template (vLLM's
// and SGLang's shapes).
struct TokenizeRequest {
  std::string model;
  std::optional<std::string> prompt;    // "prompt": text (or "text", SGLang's name)
  std::optional<ChatRequest> chat;      // "messages": [...], with add_generation_prompt and chat_template_kwargs
  bool add_special_tokens = true;       // text only: the tokenizer's BOS, as for completions
  bool return_token_strs = false;       // also each token's text
};

// POST /detokenize: {"tokens": [ids]}.
struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};

// Parses and validates a request body. Nothing is thrown; every refusal is a
// Status as described at the top of this file.
Result<CompletionRequest> parse_completion_request(std::string_view body, const ProtocolLimits& limits);
Result<ChatRequest> parse_chat_request(std::string_view body, const ProtocolLimits& limits);
Result<TokenizeRequest> parse_tokenize_request(std::string_view body, const ProtocolLimits& limits);
Result<DetokenizeRequest> parse_detokenize_request(std::string_view body, const ProtocolLimits& limits);

// ---- errors --------------------------------------------------------------------------------

// An error as the client sees it. `type` is OpenAI's category:
// invalid_request_error (400, 404), rate_limit_error (429),
// service_unavailable_error (503), server_error (500).
struct ProtocolError {
  int http_status = 500;
  std::string type = "server_error";
  std::string param;                    // the request parameter at fault; empty: none (null in JSON)
  std::string message;
  std::string code;                     // a machine-readable code ("model_not_found"); empty: null in JSON
};

// The HTTP status a refused request gets. kInvalidArgument, kOutOfRange and
// kFailedPrecondition (the server's state refuses it, e.g. /flush_cache while
// requests run, as SGLang answers): 400; kNotFound: 404 (the only one the parsers return is an unknown model);
// kResourceExhausted: `resource_exhausted_status` — 503 by default, for a
// server that is full for now (queue, KV budget), or 429 where the caller
// knows the limit is the client's own (rate limiting); kUnavailable: 503;
// everything else (and OK, which is a caller bug) 500. `param` comes from a
// message that starts with "parameter '<name>'".
ProtocolError protocol_error(const Status& status, int resource_exhausted_status = 503);
// The words of the refusal of a prompt that leaves no room to generate: with
// them, protocol_error() gives OpenAI's code "context_length_exceeded".
inline constexpr std::string_view kContextLengthExceeded = "leave no room to generate in a context of";

// {"error": {"message": ..., "type": ..., "param": ... | null, "code": ... | null}}
std::string error_body(const ProtocolError& error);

// ---- responses -----------------------------------------------------------------------------

enum class FinishReason : uint8_t {
  kStop,    // end-of-sequence, a stop token or a stop string
  kLength,  // max_tokens reached, or the context is full
  kAbort,   // cancelled by the server (it is shutting down) before either (SGLang's and vLLM's "abort")
};
std::string_view finish_reason_name(FinishReason reason);  // "stop", "length", "abort"

// Token counts of one request. cached = prompt tokens served from the KV
// cache instead of being computed, split by the tier they were found in.
struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens_device = 0;     // prefix found in L1 (GPU memory)
  int64_t cached_tokens_host = 0;       // prefix restored from L2 (host memory), storage's excluded
  int64_t cached_tokens_storage = 0;    // prefix fetched from storage (L3) into L2 for this request, then restored
};

// Identifies one response; every chunk of a stream repeats it.
struct ResponseMeta {
  std::string id;                       // "cmpl-…" / "chatcmpl-…", made by the caller
  std::string model;
  int64_t created = 0;                  // Unix seconds, from the caller's clock
};

// One candidate at a position: a token's bytes (which may end inside a
// character; the JSON shows them with U+FFFD, chat's "bytes" exactly) and its
// log-probability.
struct LogprobToken {
  std::string token;
  float logprob = 0;
};

// The log-probabilities of one position of a choice: the token there and the
// most likely alternatives. A prompt's first token has none (null).
struct LogprobEntry {
  LogprobToken chosen;
  bool has_logprob = true;
  std::vector<LogprobToken> top;  // most likely first
};

// One choice of a finished request. `token_ids` is written (vLLM's field)
// only when the server runs in token-id mode.
struct Choice {
  size_t index = 0;
  std::string text;
  FinishReason finish_reason = FinishReason::kStop;
  std::optional<std::vector<int32_t>> token_ids;
  // Completions: one entry per token of `text` (with echo, the prompt's
  // first); chat: per generated token. Absent: "logprobs": null.
  std::optional<std::vector<LogprobEntry>> logprobs;
  std::string reasoning_content;  // chat: the model's thinking, split from `text` by a reasoning parser; empty: absent
};

// Whole responses. Text is JSON-escaped with invalid UTF-8 replaced by U+FFFD,
// so a token that ends mid-character cannot break the body.
//   {"id", "object": "text_completion", "created", "model",
//    "choices": [{"index", "text", "logprobs", "finish_reason"[, "token_ids"]}],
//    "usage": {"prompt_tokens", "completion_tokens", "total_tokens",
//              "prompt_tokens_details": {"cached_tokens"},
//              "hiq_cached_tokens_by_tier": {"device", "host"}}}
// Completion logprobs are OpenAI's legacy shape: {"tokens", "token_logprobs",
// "top_logprobs": [{token: logprob}], "text_offset"}; chat's are
// {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}. A
// log-probability of -inf is written as -9999.0, as OpenAI does.
std::string completion_response(const ResponseMeta& meta, std::span<const Choice> choices, const Usage& usage);
// As above with "object": "chat.completion" and, in the choice,
// "message": {"role": "assistant", "content"[, "reasoning_content"]} in place of "text".
std::string chat_response(const ResponseMeta& meta, std::span<const Choice> choices, const Usage& usage);
// One choice.
std::string completion_response(const ResponseMeta& meta, const Choice& choice, const Usage& usage);
std::string chat_response(const ResponseMeta& meta, const Choice& choice, const Usage& usage);

// ---- streaming (server-sent events) -----------------------------------------------------------
//
// A stream is a sequence of events "data: <json>\n\n" ended by
// "data: [DONE]\n\n". Completions: text chunks, the last of which carries the
// finish_reason. Chat: a role chunk (delta {"role": "assistant", "content": ""}),
// content chunks (delta {"content"}), a finish chunk (delta {} and the
// finish_reason). With include_usage every chunk carries "usage": null and a
// last chunk with "choices": [] carries the usage, as OpenAI does.

struct StreamContext {
  ResponseMeta meta;
  bool include_usage = false;
};

// What a chunk says besides its text and ids: the choice it belongs to, and
// the log-probabilities of the tokens it carries.
struct ChunkExtras {
  size_t index = 0;
  const std::vector<LogprobEntry>* logprobs = nullptr;
  size_t text_offset = 0;  // completions: the first entry's offset in the choice's text so far
};
// The characters of the choice's text that `entries` stand for, as
// completions' text_offset counts them: a stream adds them up chunk by chunk.
size_t logprob_text_characters(const std::vector<LogprobEntry>& entries);

// object "text_completion"; finish_reason null until `finish` is given.
std::string completion_chunk(const StreamContext& stream, std::string_view text,
                             std::optional<FinishReason> finish = std::nullopt,
                             const std::vector<int32_t>* token_ids = nullptr, const ChunkExtras& extras = {});
// object "chat.completion.chunk".
std::string chat_role_chunk(const StreamContext& stream, size_t index = 0);
std::string chat_content_chunk(const StreamContext& stream, std::string_view text,
                               const std::vector<int32_t>* token_ids = nullptr, const ChunkExtras& extras = {});
// delta {"reasoning_content"}: thinking split off by a reasoning parser.
std::string chat_reasoning_chunk(const StreamContext& stream, std::string_view text, size_t index = 0);
std::string chat_finish_chunk(const StreamContext& stream, FinishReason finish, size_t index = 0);
// The usage chunk; `chat` picks the object name.
std::string usage_chunk(const StreamContext& stream, bool chat, const Usage& usage);
// An error after the stream has started (the HTTP status is already sent):
// "data: {"error": ...}\n\n"; send done_event() after it.
std::string error_event(const ProtocolError& error);
// "data: [DONE]\n\n".
std::string done_event();

// ---- tokenizer endpoints -----------------------------------------------------------------------

// {"tokens", "count", "max_model_len"[, "token_strs"]} (vLLM's shape; SGLang's
// clients read "tokens" and "count").
std::string tokenize_response(std::span<const int32_t> tokens, size_t max_model_len,
                              const std::vector<std::string>* token_strs = nullptr);
// {"prompt", "text"}: vLLM's and SGLang's names for the same text.
std::string detokenize_response(std::string_view text);

}  // namespace hiq::openai
