// The request half of server/openai.h: parsing and validating request bodies.
// Responses and errors are in openai_response.cc.
#include "server/openai.h"

#include <algorithm>
#include <charconv>
#include <exception>
#include <cmath>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/json_input.h"

namespace hiq::openai {
namespace {

// Requests keep their keys in the order sent: chat templates print them.
using json = nlohmann::ordered_json;

constexpr size_t kMaxStops = 4;  // OpenAI's limit

// ---- describing what a client sent ------------------------------------------------------------

std::string format_double(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::string("?");
}

// A client's string for a message, cut after 40 bytes (an error body stays short).
std::string quote(std::string_view s) { return quote_for_message(s, 40); }

// "got 3.5", "got the string 'abc'", "got an array": what a field held.
std::string describe(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return v.get<bool>() ? "true" : "false";
    case json::value_t::number_integer: return std::to_string(v.get<int64_t>());
    case json::value_t::number_unsigned: return std::to_string(v.get<uint64_t>());
    case json::value_t::number_float: return v.dump();  // 5.0 stays "5.0": it was refused for being a float
    case json::value_t::string: return "the string " + quote(v.get_ref<const std::string&>());
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "an unsupported value";
  }
}

// Every message about one parameter starts the same way, so protocol_error()
// can recover the parameter's name (see openai.h).
Status bad_param(std::string_view param, std::string_view problem, StatusCode code = StatusCode::kInvalidArgument) {
  std::string msg = "parameter '";
  msg += param;
  msg += "' ";
  msg += problem;
  return {code, std::move(msg)};
}
Status bad_param(std::string_view param, std::string_view expected, const json& got) {
  return bad_param(param, std::string(expected) + ", got " + describe(got));
}
// A parameter we know but do not implement: "parameter 'echo' is not supported
// by this server: only false is accepted".
Status unsupported(std::string_view param, std::string_view detail) {
  return bad_param(param, "is not supported by this server: " + std::string(detail));
}

Result<json> parse_body(std::string_view body, const ProtocolLimits& limits) {
  if (body.size() > limits.max_body_bytes)
    return out_of_range("request body is " + std::to_string(body.size()) + " bytes, more than the limit of " +
                        std::to_string(limits.max_body_bytes));
  if (json_nesting_depth(body, limits.max_json_depth) > limits.max_json_depth)
    return invalid_argument("request body nests JSON more than " + std::to_string(limits.max_json_depth) +
                            " levels deep");
  json value = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return invalid_argument("request body is not valid JSON (or not valid UTF-8)");
  if (!value.is_object()) return invalid_argument("request body must be a JSON object, got " + describe(value));
  return value;
}

// ---- typed fields ----------------------------------------------------------------------------
//
// A field that is absent or null takes its default: clients built on typed
// models send `"seed": null` for "not given".

const json* field(const json& body, std::string_view name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

Result<std::optional<double>> number_field(const json& body, std::string_view name) {
  const json* v = field(body, name);
  if (v == nullptr) return std::optional<double>();
  if (!v->is_number()) return bad_param(name, "must be a number", *v);
  return std::optional<double>(v->get<double>());
}

// An integral float (5.0, as Python clients send a computed count) is taken
// as its integer, as SGLang's and vLLM's request models take it; 5.5 is refused.
std::optional<int64_t> integral_value(const json& v) {
  if (!v.is_number_float()) return std::nullopt;
  const double d = v.get<double>();
  // 2^63 is exact as a double; anything at or past it does not fit.
  if (!(d >= -0x1p63 && d < 0x1p63) || std::trunc(d) != d) return std::nullopt;
  return static_cast<int64_t>(d);
}

// An integer within [lo, hi].
Result<std::optional<int64_t>> int_field(const json& body, std::string_view name, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (v == nullptr) return std::optional<int64_t>();
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (const auto i = integral_value(*v)) {
    if (*i < lo || *i > hi) return bad_param(name, "must be an integer in " + range, *v);
    return std::optional<int64_t>(*i);
  }
  if (v->is_number_unsigned()) {
    const auto u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(hi) || (lo > 0 && u < static_cast<uint64_t>(lo)))
      return bad_param(name, "must be an integer in " + range, *v);
    return std::optional<int64_t>(static_cast<int64_t>(u));
  }
  if (v->is_number_integer()) {
    const auto i = v->get<int64_t>();
    if (i < lo || i > hi) return bad_param(name, "must be an integer in " + range, *v);
    return std::optional<int64_t>(i);
  }
  return bad_param(name, "must be an integer", *v);
}

Result<std::optional<bool>> bool_field(const json& body, std::string_view name) {
  const json* v = field(body, name);
  if (v == nullptr) return std::optional<bool>();
  if (!v->is_boolean()) return bad_param(name, "must be true or false", *v);
  return std::optional<bool>(v->get<bool>());
}

// `param` names the field in errors when it is nested ("messages[2].role").
Result<std::optional<std::string>> string_field(const json& object, std::string_view name,
                                                std::string_view param = {}) {
  const json* v = field(object, name);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) return bad_param(param.empty() ? name : param, "must be a string", *v);
  return std::optional<std::string>(v->get<std::string>());
}

// Whether v is a JSON integer or a whole-valued float (integral_value).
bool is_integer(const json& v) { return v.is_number_integer() || integral_value(v).has_value(); }

// Either as an int64; nullopt past its range (or for anything else).
std::optional<int64_t> integer_value(const json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    return u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? std::optional(static_cast<int64_t>(u))
                                                                            : std::nullopt;
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return integral_value(v);
}

// A token id: an integer in [0, vocab_size) (or [0, 2^31) without a vocabulary).
Result<int32_t> token_id(const json& v, std::string_view param, const ProtocolLimits& limits) {
  const int64_t end = limits.vocab_size > 0 ? limits.vocab_size : int64_t{1} << 31;
  if (!is_integer(v)) return bad_param(param, "must be an integer token id", v);
  const std::optional<int64_t> id = integer_value(v);
  if (!id || *id < 0 || *id >= end)
    return bad_param(param, "must be a token id in [0, " + std::to_string(end) + ")", v);
  return static_cast<int32_t>(*id);
}

std::string element(std::string_view param, size_t i) {
  return std::string(param) + "[" + std::to_string(i) + "]";
}

// ---- parameters both endpoints share -----------------------------------------------------------

Result<std::string> parse_model(const json& body, const ProtocolLimits& limits) {
  HIQ_ASSIGN_OR_RETURN(auto model, string_field(body, "model"));
  if (!model) return limits.served_model;
  if (!limits.served_model.empty() && *model != limits.served_model)
    return bad_param("model", "names " + quote(*model) + ", which this server does not serve (it serves " +
                                  quote(limits.served_model) + ")",
                     StatusCode::kNotFound);
  return *std::move(model);
}

Result<std::vector<std::string>> parse_stop(const json& body, const ProtocolLimits& limits) {
  std::vector<std::string> stops;
  const json* v = field(body, "stop");
  if (v == nullptr) return stops;
  auto take = [&](const json& s, std::string_view param) -> Status {
    if (!s.is_string()) return bad_param(param, "must be a string", s);
    const auto& text = s.get_ref<const std::string&>();
    if (text.empty()) return bad_param(param, "must not be an empty string");
    if (text.size() > limits.max_stop_bytes)
      return bad_param(param,
                       "is " + std::to_string(text.size()) + " bytes, more than the limit of " +
                           std::to_string(limits.max_stop_bytes),
                       StatusCode::kOutOfRange);
    stops.push_back(text);
    return Status::ok();
  };
  if (v->is_string()) {
    HIQ_RETURN_IF_ERROR(take(*v, "stop"));
  } else if (v->is_array()) {
    if (v->size() > kMaxStops)
      return bad_param("stop", "holds " + std::to_string(v->size()) + " strings; at most 4 are allowed",
                       StatusCode::kOutOfRange);
    for (size_t i = 0; i < v->size(); ++i) HIQ_RETURN_IF_ERROR(take((*v)[i], element("stop", i)));
  } else {
    return bad_param("stop", "must be a string or an array of strings", *v);
  }
  return stops;
}

Result<std::vector<int32_t>> parse_stop_token_ids(const json& body, const ProtocolLimits& limits) {
  std::vector<int32_t> ids;
  const json* v = field(body, "stop_token_ids");
  if (v == nullptr) return ids;
  if (!v->is_array()) return bad_param("stop_token_ids", "must be an array of token ids", *v);
  if (v->size() > static_cast<size_t>(limits.max_stop_token_ids))
    return bad_param("stop_token_ids",
                     "holds " + std::to_string(v->size()) + " ids, more than the limit of " +
                         std::to_string(limits.max_stop_token_ids),
                     StatusCode::kOutOfRange);
  for (size_t i = 0; i < v->size(); ++i) {
    HIQ_ASSIGN_OR_RETURN(const int32_t id, token_id((*v)[i], element("stop_token_ids", i), limits));
    ids.push_back(id);
  }
  return ids;
}

// A parameter we know but do not implement passes only at its default.
Status require_number_default(const json& body, std::string_view name, double fallback) {
  HIQ_ASSIGN_OR_RETURN(const auto v, number_field(body, name));
  if (v && *v != fallback)
    return unsupported(name, "only its default " + format_double(fallback) + " is accepted, got " + format_double(*v));
  return Status::ok();
}
Status require_int_default(const json& body, std::string_view name, int64_t fallback) {
  HIQ_ASSIGN_OR_RETURN(const auto v, int_field(body, name, std::numeric_limits<int64_t>::min(),
                                               std::numeric_limits<int64_t>::max()));
  if (v && *v != fallback)
    return unsupported(name, "only its default " + std::to_string(fallback) + " is accepted, got " + std::to_string(*v));
  return Status::ok();
}
Status require_false(const json& body, std::string_view name) {
  HIQ_ASSIGN_OR_RETURN(const auto v, bool_field(body, name));
  if (v && *v) return unsupported(name, "only false is accepted");
  return Status::ok();
}

// Sampling, lengths, stops, streaming and the unsupported parameters both
// endpoints know. `max_tokens` is resolved by the caller (the endpoints differ).
Result<GenerationParams> parse_generation(const json& body, const ProtocolLimits& limits, int max_tokens) {
  GenerationParams p;
  p.max_tokens = max_tokens;

  HIQ_ASSIGN_OR_RETURN(p.temperature, number_field(body, "temperature"));
  if (p.temperature && !(*p.temperature >= 0.0 && *p.temperature <= 2.0))
    return bad_param("temperature", "must be a number in [0, 2]", *field(body, "temperature"));
  HIQ_ASSIGN_OR_RETURN(p.top_p, number_field(body, "top_p"));
  // Sampling runs in float: a top_p that rounds to 0 there is out of range too.
  if (p.top_p && !(static_cast<float>(*p.top_p) > 0.0f && *p.top_p <= 1.0))
    return bad_param("top_p", "must be a number in (0, 1] (at least 1.2e-38)", *field(body, "top_p"));
  HIQ_ASSIGN_OR_RETURN(const auto top_k, int_field(body, "top_k", -1, std::numeric_limits<int32_t>::max()));
  if (top_k) {
    if (*top_k == 0) return bad_param("top_k", "must be -1 (all tokens) or at least 1, got 0");
    p.top_k = static_cast<int>(*top_k);
  }
  HIQ_ASSIGN_OR_RETURN(const auto n, int_field(body, "n", 1, limits.max_n));
  p.n = static_cast<int>(n.value_or(1));
  if (const json* seed = field(body, "seed")) {
    // A whole float up to 2^64 (past integral_value's int64 range: a seed is unsigned).
    const double d = seed->is_number_float() ? seed->get<double>() : -1.0;
    const bool unsigned_float = d >= 0 && d < 0x1p64 && std::trunc(d) == d;
    if (seed->is_number_unsigned()) p.seed = seed->get<uint64_t>();
    else if (unsigned_float) p.seed = static_cast<uint64_t>(d);
    else if (seed->is_number_integer() || integral_value(*seed))
      return bad_param("seed", "must be an integer in [0, 2^64)", *seed);
    else return bad_param("seed", "must be an integer", *seed);
  }
  HIQ_ASSIGN_OR_RETURN(p.stop, parse_stop(body, limits));
  HIQ_ASSIGN_OR_RETURN(p.stop_token_ids, parse_stop_token_ids(body, limits));
  HIQ_ASSIGN_OR_RETURN(const auto ignore_eos, bool_field(body, "ignore_eos"));
  p.ignore_eos = ignore_eos.value_or(false);

  HIQ_ASSIGN_OR_RETURN(const auto stream, bool_field(body, "stream"));
  p.stream = stream.value_or(false);
  if (const json* options = field(body, "stream_options")) {
    if (!options->is_object()) return bad_param("stream_options", "must be an object", *options);
    if (!p.stream) return bad_param("stream_options", "is only allowed when 'stream' is true");
    if (const json* usage = field(*options, "include_usage")) {
      if (!usage->is_boolean()) return bad_param("stream_options.include_usage", "must be true or false", *usage);
      p.include_usage = usage->get<bool>();
    }
  }

  HIQ_RETURN_IF_ERROR(require_number_default(body, "presence_penalty", 0));
  HIQ_RETURN_IF_ERROR(require_number_default(body, "frequency_penalty", 0));
  HIQ_RETURN_IF_ERROR(require_number_default(body, "repetition_penalty", 1));
  HIQ_RETURN_IF_ERROR(require_number_default(body, "min_p", 0));
  HIQ_RETURN_IF_ERROR(require_int_default(body, "min_tokens", 0));
  if (const json* bias = field(body, "logit_bias")) {
    if (!bias->is_object()) return bad_param("logit_bias", "must be an object", *bias);
    if (!bias->empty()) return unsupported("logit_bias", "only an empty object is accepted");
  }
  HIQ_ASSIGN_OR_RETURN(const auto user, string_field(body, "user"));  // only type-checked
  (void)user;
  return p;
}

// max_tokens: an integer in [1, limits.max_max_tokens], or `fallback` when absent.
Result<int> parse_max_tokens(const json& body, std::string_view name, const ProtocolLimits& limits, int fallback) {
  const json* v = field(body, name);
  if (v == nullptr) return fallback;
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(limits.max_max_tokens))
    return bad_param(name, "is " + v->dump() + ", more than this server's limit of " +
                               std::to_string(limits.max_max_tokens),
                     StatusCode::kOutOfRange);
  HIQ_ASSIGN_OR_RETURN(const auto n, int_field(body, name, std::numeric_limits<int64_t>::min(),
                                               std::numeric_limits<int64_t>::max()));
  if (*n < 1) return bad_param(name, "must be at least 1", *v);
  if (*n > limits.max_max_tokens)
    return bad_param(name, "is " + std::to_string(*n) + ", more than this server's limit of " +
                               std::to_string(limits.max_max_tokens),
                     StatusCode::kOutOfRange);
  return static_cast<int>(*n);
}

// ---- /v1/completions -------------------------------------------------------------------------

Status parse_token_prompt(const json& ids, std::string_view param, const ProtocolLimits& limits,
                          std::vector<int32_t>& out) {
  if (ids.empty()) return bad_param(param, "must not be empty");
  if (ids.size() > static_cast<size_t>(limits.max_prompt_tokens))
    return bad_param(param,
                     "holds " + std::to_string(ids.size()) + " tokens, more than the limit of " +
                         std::to_string(limits.max_prompt_tokens),
                     StatusCode::kOutOfRange);
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    HIQ_ASSIGN_OR_RETURN(const int32_t id, token_id(ids[i], element(param, i), limits));
    out.push_back(id);
  }
  return Status::ok();
}

Status parse_text_prompt(const json& text, std::string_view param, const ProtocolLimits& limits, std::string& out) {
  const auto& s = text.get_ref<const std::string&>();
  if (s.empty()) return bad_param(param, "must not be empty");
  if (s.size() > limits.max_prompt_bytes)
    return bad_param(param,
                     "is " + std::to_string(s.size()) + " bytes, more than the limit of " +
                         std::to_string(limits.max_prompt_bytes),
                     StatusCode::kOutOfRange);
  out = s;
  return Status::ok();
}

// "prompt": "text" | [ids] | ["text"] | [[ids]]. Several prompts (a batch) are refused.
Status parse_prompt(const json& body, const ProtocolLimits& limits, CompletionRequest& req) {
  const json* v = field(body, "prompt");
  constexpr std::string_view kShape = "must be a string, an array of token ids, or an array holding one of these";
  if (v == nullptr) return bad_param("prompt", "is required");
  if (v->is_string()) return parse_text_prompt(*v, "prompt", limits, req.prompt_text);
  if (!v->is_array()) return bad_param("prompt", kShape, *v);
  if (v->empty()) return bad_param("prompt", "must not be empty");
  const json& first = v->front();
  if (first.is_string() || first.is_array()) {
    if (v->size() > 1)
      return bad_param("prompt", "holds " + std::to_string(v->size()) +
                                     " prompts; batch prompts are not supported, send one prompt per request");
    if (first.is_string()) return parse_text_prompt(first, "prompt[0]", limits, req.prompt_text);
    return parse_token_prompt(first, "prompt[0]", limits, req.prompt_token_ids);
  }
  if (is_integer(first)) return parse_token_prompt(*v, "prompt", limits, req.prompt_token_ids);
  return bad_param("prompt[0]", "must be a string, an array of token ids or a token id", first);
}

Result<CompletionRequest> parse_completion(std::string_view body_text, const ProtocolLimits& limits) {
  HIQ_ASSIGN_OR_RETURN(const json body, parse_body(body_text, limits));
  CompletionRequest req;
  HIQ_ASSIGN_OR_RETURN(req.model, parse_model(body, limits));
  HIQ_RETURN_IF_ERROR(parse_prompt(body, limits, req));
  HIQ_ASSIGN_OR_RETURN(const int max_tokens,
                       parse_max_tokens(body, "max_tokens", limits, limits.default_completion_max_tokens));
  HIQ_ASSIGN_OR_RETURN(req.params, parse_generation(body, limits, max_tokens));
  HIQ_ASSIGN_OR_RETURN(const auto best_of, int_field(body, "best_of", 1, limits.max_n));
  if (best_of && *best_of != req.params.n)
    return unsupported("best_of", "only best_of equal to n is accepted (every choice is returned)");
  HIQ_ASSIGN_OR_RETURN(const auto echo, bool_field(body, "echo"));
  req.echo = echo.value_or(false);
  // completions: logprobs is an integer, how many alternatives besides the chosen token
  HIQ_ASSIGN_OR_RETURN(const auto logprobs, int_field(body, "logprobs", 0, limits.max_completion_logprobs));
  req.params.logprobs = logprobs ? static_cast<int>(*logprobs) : -1;
  HIQ_ASSIGN_OR_RETURN(const auto add_special, bool_field(body, "add_special_tokens"));
  req.add_special_tokens = add_special.value_or(true);
  HIQ_ASSIGN_OR_RETURN(const auto suffix, string_field(body, "suffix"));
  if (suffix && !suffix->empty()) return unsupported("suffix", "only an empty suffix is accepted");
  return req;
}

// ---- /v1/chat/completions --------------------------------------------------------------------

// "content": "text" | [{"type": "text", "text": "..."}, ...] (parts joined with "\n").
Result<std::string> parse_content(const json& message, const std::string& where) {
  const std::string param = where + ".content";
  const json* v = field(message, "content");
  if (v == nullptr) return bad_param(param, "is required");
  if (v->is_string()) return v->get<std::string>();
  if (!v->is_array()) return bad_param(param, "must be a string or an array of text parts", *v);
  if (v->empty()) return bad_param(param, "must not be an empty array");
  std::string text;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& part = (*v)[i];
    const std::string part_param = element(param, i);
    if (!part.is_object()) return bad_param(part_param, "must be an object {\"type\": \"text\", \"text\": ...}", part);
    HIQ_ASSIGN_OR_RETURN(const auto type, string_field(part, "type", part_param + ".type"));
    if (!type) return bad_param(part_param + ".type", "is required");
    if (*type != "text")
      return bad_param(part_param + ".type", "is " + quote(*type) + "; only text parts are supported");
    HIQ_ASSIGN_OR_RETURN(const auto part_text, string_field(part, "text", part_param + ".text"));
    if (!part_text) return bad_param(part_param + ".text", "is required");
    if (i > 0) text += '\n';
    text += *part_text;
  }
  return text;
}

// One message, as the template will read it (see ChatRequest::messages).
Result<json> parse_message(const json& message, size_t index) {
  const std::string where = element("messages", index);
  if (!message.is_object()) return bad_param(where, "must be an object with 'role' and 'content'", message);
  HIQ_ASSIGN_OR_RETURN(const auto role, string_field(message, "role", where + ".role"));
  if (!role) return bad_param(where + ".role", "is required");
  if (*role == "tool" || *role == "function")
    return unsupported(where + ".role", "the role " + quote(*role) + " needs tool calling, which is not implemented");
  if (*role != "system" && *role != "developer" && *role != "user" && *role != "assistant")
    return bad_param(where + ".role", "must be one of 'system', 'developer', 'user', 'assistant', got " + quote(*role));
  if (const json* calls = field(message, "tool_calls"); calls && !(calls->is_array() && calls->empty()))
    return unsupported(where + ".tool_calls", "tool calling is not implemented");
  json out = json::object();
  out["role"] = *role == "developer" ? "system" : *role;  // templates know system, not OpenAI's newer name
  HIQ_ASSIGN_OR_RETURN(out["content"], parse_content(message, where));
  HIQ_ASSIGN_OR_RETURN(const auto name, string_field(message, "name", where + ".name"));
  if (name) out["name"] = *name;
  HIQ_ASSIGN_OR_RETURN(const auto reasoning, string_field(message, "reasoning_content", where + ".reasoning_content"));
  if (reasoning) out["reasoning_content"] = *reasoning;
  return out;
}

Status parse_messages(const json& body, const ProtocolLimits& limits, ChatRequest& req) {
  const json* v = field(body, "messages");
  if (v == nullptr) return bad_param("messages", "is required");
  if (!v->is_array()) return bad_param("messages", "must be an array of messages", *v);
  if (v->empty()) return bad_param("messages", "must not be empty");
  if (v->size() > static_cast<size_t>(limits.max_messages))
    return bad_param("messages",
                     "holds " + std::to_string(v->size()) + " messages, more than the limit of " +
                         std::to_string(limits.max_messages),
                     StatusCode::kOutOfRange);
  size_t bytes = 0;
  for (size_t i = 0; i < v->size(); ++i) {
    HIQ_ASSIGN_OR_RETURN(json message, parse_message((*v)[i], i));
    bytes += message["content"].get_ref<const std::string&>().size();
    if (const auto it = message.find("reasoning_content"); it != message.end())
      bytes += it->get_ref<const std::string&>().size();
    if (bytes > limits.max_prompt_bytes)
      return bad_param("messages", "hold more than " + std::to_string(limits.max_prompt_bytes) +
                                       " bytes of content, the limit",
                       StatusCode::kOutOfRange);
    req.messages.push_back(std::move(message));
  }
  return Status::ok();
}

// tools, functions, tool_choice, function_call, response_format and the
// output options (modalities, audio, prediction, reasoning_effort, …):
// accepted only when they ask for nothing.
Status refuse_tools_and_formats(const json& body) {
  for (std::string_view name : {"tools", "functions"}) {
    if (const json* v = field(body, name)) {
      if (!v->is_array()) return bad_param(name, "must be an array", *v);
      if (!v->empty()) return unsupported(name, "tool calling is not implemented");
    }
  }
  for (std::string_view name : {"tool_choice", "function_call"}) {
    if (const json* v = field(body, name)) {
      if (!v->is_string() && !v->is_object()) return bad_param(name, "must be a string or an object", *v);
      if (!v->is_string() || (*v != "none" && *v != "auto"))
        return unsupported(name, "only 'none' and 'auto' are accepted (tool calling is not implemented)");
    }
  }
  // Outputs this server cannot produce: refused, never silently plain text.
  if (const json* v = field(body, "modalities")) {
    if (!v->is_array()) return bad_param("modalities", "must be an array", *v);
    for (const json& m : *v)
      if (m != "text") return unsupported("modalities", "only \"text\" is accepted, got " + describe(m));
  }
  if (field(body, "audio") != nullptr) return unsupported("audio", "audio output is not implemented");
  if (field(body, "prediction") != nullptr) return unsupported("prediction", "predicted outputs are not implemented");
  if (field(body, "web_search_options") != nullptr) return unsupported("web_search_options", "web search is not implemented");
  for (std::string_view name : {"reasoning_effort", "verbosity"})
    if (field(body, name) != nullptr)
      return unsupported(name, "only null is accepted (a Qwen3 template switches thinking with "
                               "chat_template_kwargs {\"enable_thinking\": false})");
  if (const json* v = field(body, "response_format")) {
    if (!v->is_object()) return bad_param("response_format", "must be an object", *v);
    HIQ_ASSIGN_OR_RETURN(const auto type, string_field(*v, "type", "response_format.type"));
    if (type && *type != "text")
      return unsupported("response_format.type", "only 'text' is accepted, got " + quote(*type));
  }
  return Status::ok();
}

// add_generation_prompt and chat_template_kwargs (vLLM's and SGLang's
// extensions). continue_final_message and a request's own chat_template are
// refused by name.
Status parse_template_options(const json& body, ChatRequest& req) {
  HIQ_ASSIGN_OR_RETURN(const auto generation_prompt, bool_field(body, "add_generation_prompt"));
  req.add_generation_prompt = generation_prompt.value_or(true);
  if (const json* kwargs = field(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) return bad_param("chat_template_kwargs", "must be an object", *kwargs);
    for (const auto& [key, value] : kwargs->items())
      if (key == "messages" || key == "add_generation_prompt" || key == "bos_token" || key == "eos_token")
        return bad_param("chat_template_kwargs", "must not set " + quote(key) + ", which the server sets");
    req.chat_template_kwargs = *kwargs;
  }
  HIQ_RETURN_IF_ERROR(require_false(body, "continue_final_message"));
  if (field(body, "chat_template") != nullptr)
    return unsupported("chat_template", "a request cannot bring its own template; the server's is used");
  return Status::ok();
}

Result<ChatRequest> parse_chat(std::string_view body_text, const ProtocolLimits& limits) {
  HIQ_ASSIGN_OR_RETURN(const json body, parse_body(body_text, limits));
  ChatRequest req;
  HIQ_ASSIGN_OR_RETURN(req.model, parse_model(body, limits));
  HIQ_RETURN_IF_ERROR(parse_messages(body, limits, req));
  // max_completion_tokens is OpenAI's current name, max_tokens the deprecated one.
  HIQ_ASSIGN_OR_RETURN(const int legacy, parse_max_tokens(body, "max_tokens", limits, 0));
  HIQ_ASSIGN_OR_RETURN(const int current, parse_max_tokens(body, "max_completion_tokens", limits, 0));
  if (legacy != 0 && current != 0 && legacy != current)
    return bad_param("max_completion_tokens", "is " + std::to_string(current) + " but max_tokens is " +
                                                  std::to_string(legacy) + "; send one of them");
  const int max_tokens = current != 0 ? current : legacy != 0 ? legacy : limits.default_chat_max_tokens;
  HIQ_ASSIGN_OR_RETURN(req.params, parse_generation(body, limits, max_tokens));
  // chat: logprobs is a boolean, top_logprobs how many alternatives
  HIQ_ASSIGN_OR_RETURN(const auto logprobs, bool_field(body, "logprobs"));
  HIQ_ASSIGN_OR_RETURN(const auto top_logprobs, int_field(body, "top_logprobs", 0, limits.max_top_logprobs));
  if (top_logprobs.value_or(0) > 0 && !logprobs.value_or(false))
    return bad_param("top_logprobs", "needs 'logprobs': true");
  if (logprobs.value_or(false)) req.params.logprobs = static_cast<int>(top_logprobs.value_or(0));
  HIQ_RETURN_IF_ERROR(refuse_tools_and_formats(body));
  HIQ_RETURN_IF_ERROR(parse_template_options(body, req));
  return req;
}

// ---- /tokenize and /detokenize ------------------------------------------------------------------

Result<TokenizeRequest> parse_tokenize(std::string_view body_text, const ProtocolLimits& limits) {
  HIQ_ASSIGN_OR_RETURN(const json body, parse_body(body_text, limits));
  TokenizeRequest req;
  HIQ_ASSIGN_OR_RETURN(req.model, parse_model(body, limits));
  const json* prompt = field(body, "prompt");
  const char* prompt_name = "prompt";
  if (prompt == nullptr && (prompt = field(body, "text")) != nullptr) prompt_name = "text";  // SGLang's name
  const json* messages = field(body, "messages");
  if ((prompt == nullptr) == (messages == nullptr))
    return bad_param("prompt", "or 'messages' is required, and only one of them");
  if (prompt != nullptr) {
    if (!prompt->is_string()) return bad_param(prompt_name, "must be a string", *prompt);
    if (prompt->get_ref<const std::string&>().size() > limits.max_prompt_bytes)
      return bad_param(prompt_name, "is longer than the limit of " + std::to_string(limits.max_prompt_bytes) + " bytes",
                       StatusCode::kOutOfRange);
    req.prompt = prompt->get<std::string>();
  } else {
    ChatRequest chat;
    HIQ_RETURN_IF_ERROR(parse_messages(body, limits, chat));
    HIQ_RETURN_IF_ERROR(parse_template_options(body, chat));
    req.chat = std::move(chat);
  }
  HIQ_ASSIGN_OR_RETURN(const auto add_special, bool_field(body, "add_special_tokens"));
  req.add_special_tokens = add_special.value_or(true);
  HIQ_ASSIGN_OR_RETURN(const auto strs, bool_field(body, "return_token_strs"));
  req.return_token_strs = strs.value_or(false);
  return req;
}

Result<DetokenizeRequest> parse_detokenize(std::string_view body_text, const ProtocolLimits& limits) {
  HIQ_ASSIGN_OR_RETURN(const json body, parse_body(body_text, limits));
  DetokenizeRequest req;
  HIQ_ASSIGN_OR_RETURN(req.model, parse_model(body, limits));
  const json* tokens = field(body, "tokens");
  if (tokens == nullptr) return bad_param("tokens", "is required");
  if (!tokens->is_array()) return bad_param("tokens", "must be an array of token ids", *tokens);
  if (tokens->size() > static_cast<size_t>(limits.max_prompt_tokens))
    return bad_param("tokens", "holds more than the limit of " + std::to_string(limits.max_prompt_tokens) + " ids",
                     StatusCode::kOutOfRange);
  for (size_t i = 0; i < tokens->size(); ++i) {
    HIQ_ASSIGN_OR_RETURN(const int32_t id, token_id((*tokens)[i], element("tokens", i), limits));
    req.tokens.push_back(id);
  }
  return req;
}

// Turns an exception from a code path that should throw none into a 500, so
// that a bug in a parser costs one request, not the server.
template <typename F>
auto guarded(F&& parse) -> decltype(parse()) {
  try {
    return parse();
  } catch (const std::exception& e) {
    return internal_error(std::string("request parser threw: ") + e.what());
  }
}

}  // namespace

Status ProtocolLimits::validate() const {
  if (max_body_bytes == 0) return invalid_argument("max_body_bytes must be positive");
  if (max_json_depth < 2) return invalid_argument("max_json_depth must be at least 2");
  if (max_prompt_bytes == 0) return invalid_argument("max_prompt_bytes must be positive");
  if (max_prompt_tokens < 1) return invalid_argument("max_prompt_tokens must be positive");
  if (vocab_size < 0 || vocab_size > (int64_t{1} << 31))
    return invalid_argument("vocab_size must be in [0, 2^31] (0: unchecked)");
  if (max_messages < 1) return invalid_argument("max_messages must be positive");
  if (max_max_tokens < 1) return invalid_argument("max_max_tokens must be positive");
  if (default_completion_max_tokens < 1 || default_completion_max_tokens > max_max_tokens)
    return invalid_argument("default_completion_max_tokens must be in [1, max_max_tokens]");
  if (default_chat_max_tokens < 1 || default_chat_max_tokens > max_max_tokens)
    return invalid_argument("default_chat_max_tokens must be in [1, max_max_tokens]");
  if (max_stop_bytes == 0) return invalid_argument("max_stop_bytes must be positive");
  if (max_stop_token_ids < 0) return invalid_argument("max_stop_token_ids must not be negative");
  if (max_n < 1) return invalid_argument("max_n must be positive");
  if (max_completion_logprobs < 0 || max_completion_logprobs > 20)
    return invalid_argument("max_completion_logprobs must be in [0, 20]");
  if (max_top_logprobs < 0 || max_top_logprobs > 20) return invalid_argument("max_top_logprobs must be in [0, 20]");
  return Status::ok();
}

Result<CompletionRequest> parse_completion_request(std::string_view body, const ProtocolLimits& limits) {
  return guarded([&] { return parse_completion(body, limits); });
}

Result<ChatRequest> parse_chat_request(std::string_view body, const ProtocolLimits& limits) {
  return guarded([&] { return parse_chat(body, limits); });
}

Result<TokenizeRequest> parse_tokenize_request(std::string_view body, const ProtocolLimits& limits) {
  return guarded([&] { return parse_tokenize(body, limits); });
}

Result<DetokenizeRequest> parse_detokenize_request(std::string_view body, const ProtocolLimits& limits) {
  return guarded([&] { return parse_detokenize(body, limits); });
}

}  // namespace hiq::openai
