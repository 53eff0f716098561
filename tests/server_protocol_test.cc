// Tests of server/openai.h and server/stop_matcher.h: every request field,
// good and bad; error bodies and the Status → HTTP mapping; the exact shape of
// responses and stream chunks; stop strings across increments; and the fuzzing
// corpus of the request parsers, replayed.
#include "server/openai.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "expect_error.h"
#include "server/stop_matcher.h"

namespace hiq::openai {
namespace {

using nlohmann::json;
using testing::contains;
using testing::expect_error;

// ---- helpers ---------------------------------------------------------------------------------

const ProtocolLimits kLimits{};

// A completion body: {"prompt": "hi"} plus `extra` fields (a JSON object's inner text).
std::string completion_body(std::string_view extra = "") {
  std::string body = R"({"prompt": "hi")";
  if (!extra.empty()) body += ", " + std::string(extra);
  return body + "}";
}
std::string chat_body(std::string_view extra = "") {
  std::string body = R"({"messages": [{"role": "user", "content": "hi"}])";
  if (!extra.empty()) body += ", " + std::string(extra);
  return body + "}";
}

Result<CompletionRequest> completion(std::string_view extra, const ProtocolLimits& limits = kLimits) {
  return parse_completion_request(completion_body(extra), limits);
}
Result<ChatRequest> chat(std::string_view extra, const ProtocolLimits& limits = kLimits) {
  return parse_chat_request(chat_body(extra), limits);
}

// Both endpoints refuse `extra` as a 400 naming `param`, with every needle in the message.
void expect_both_refuse(std::string_view extra, std::string_view param, std::initializer_list<std::string_view> needles,
                        StatusCode code = StatusCode::kInvalidArgument) {
  SCOPED_TRACE(std::string(extra));
  const auto c = completion(extra);
  expect_error(c, code, needles);
  expect_error(chat(extra), code, needles);
  if (!c.is_ok()) {
    const ProtocolError e = protocol_error(c.status());
    EXPECT_EQ(e.http_status, 400);
    EXPECT_EQ(e.param, param);
  }
}

// ---- bodies ----------------------------------------------------------------------------------

TEST(OpenAiRequest, MinimalCompletionGetsOpenAiDefaults) {
  const auto r = parse_completion_request(R"({"prompt": "Hello"})", kLimits);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->prompt_text, "Hello");
  EXPECT_FALSE(r->prompt_is_tokens());
  EXPECT_EQ(r->model, "");
  const GenerationParams& p = r->params;
  EXPECT_EQ(p.max_tokens, 16);
  // Sampling left out stays unset: the server fills it from generation_config.json or OpenAI's defaults.
  EXPECT_FALSE(p.temperature.has_value());
  EXPECT_FALSE(p.top_p.has_value());
  EXPECT_FALSE(p.top_k.has_value());
  EXPECT_EQ(p.n, 1);
  EXPECT_EQ(p.logprobs, -1);
  EXPECT_FALSE(r->echo);
  EXPECT_TRUE(r->add_special_tokens);
  EXPECT_FALSE(p.seed.has_value());
  EXPECT_TRUE(p.stop.empty());
  EXPECT_TRUE(p.stop_token_ids.empty());
  EXPECT_FALSE(p.stream);
  EXPECT_FALSE(p.include_usage);
  EXPECT_FALSE(p.ignore_eos);
}

TEST(OpenAiRequest, EveryFieldIsRead) {
  const auto r = parse_completion_request(R"({
      "model": "qwen3", "prompt": "Hello", "max_tokens": 100, "temperature": 0.7, "top_p": 0.9,
      "top_k": 40, "seed": 18446744073709551615, "stop": ["\n\n", "END"], "stop_token_ids": [151645],
      "stream": true, "stream_options": {"include_usage": true}, "ignore_eos": true, "n": 1,
      "best_of": 1, "echo": false, "presence_penalty": 0, "frequency_penalty": 0.0,
      "repetition_penalty": 1, "min_p": 0, "min_tokens": 0, "logit_bias": {}, "suffix": "", "user": "u1"})",
                                          kLimits);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->model, "qwen3");
  const GenerationParams& p = r->params;
  EXPECT_EQ(p.max_tokens, 100);
  EXPECT_DOUBLE_EQ(*p.temperature, 0.7);
  EXPECT_DOUBLE_EQ(*p.top_p, 0.9);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_EQ(p.seed, std::optional<uint64_t>(UINT64_MAX));
  EXPECT_EQ(p.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{151645}));
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
  EXPECT_TRUE(p.ignore_eos);
}

TEST(OpenAiRequest, NullMeansAbsent) {
  const auto r = completion(R"("model": null, "max_tokens": null, "temperature": null, "top_p": null,
      "top_k": null, "seed": null, "stop": null, "stream": null, "stream_options": null, "n": null,
      "logprobs": null, "echo": null, "presence_penalty": null, "logit_bias": null, "user": null,
      "suffix": null, "best_of": null)");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->params.max_tokens, 16);
  EXPECT_FALSE(r->params.temperature.has_value());
  EXPECT_EQ(r->params.n, 1);
  EXPECT_EQ(r->params.logprobs, -1);
}

TEST(OpenAiRequest, UnknownFieldsAreIgnored) {
  const auto r = completion(R"("metadata": {"a": [1, 2]}, "skip_special_tokens": false, "x_vendor": 3)");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_TRUE(chat(R"("parallel_tool_calls": true, "store": false, "chat_template_kwargs": {})").is_ok());
}

TEST(OpenAiRequest, BodyMustBeAJsonObject) {
  for (std::string_view body : {"", "{", "not json", R"({"prompt": "a",})", "[1, 2]", "\"text\"", "42", "null"}) {
    SCOPED_TRACE(std::string(body));
    const auto r = parse_completion_request(body, kLimits);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(contains(r.status().message(), "request body")) << r.status().message();
    EXPECT_FALSE(parse_chat_request(body, kLimits).is_ok());
  }
}

TEST(OpenAiRequest, InvalidUtf8IsRefused) {
  const std::string body = "{\"prompt\": \"a\xff\xfe\"}";
  expect_error(parse_completion_request(body, kLimits), StatusCode::kInvalidArgument, {"not valid JSON", "UTF-8"});
}

TEST(OpenAiRequest, BodyOverTheByteLimitIsRefusedBeforeParsing) {
  ProtocolLimits limits;
  limits.max_body_bytes = 20;
  expect_error(parse_completion_request(R"({"prompt": "0123456789"})", limits), StatusCode::kOutOfRange,
               {"request body is 24 bytes", "limit of 20"});
  EXPECT_TRUE(parse_completion_request(R"({"prompt": "0123"})", limits).is_ok());
}

TEST(OpenAiRequest, DeepNestingIsRefusedBeforeParsing) {
  const std::string deep = R"({"prompt": "a", "x": )" + std::string(100, '[') + std::string(100, ']') + "}";
  expect_error(parse_completion_request(deep, kLimits), StatusCode::kInvalidArgument, {"nests", "64 levels"});
  // Brackets inside strings do not count.
  const std::string quoted = R"({"prompt": ")" + std::string(100, '[') + R"("})";
  EXPECT_TRUE(parse_completion_request(quoted, kLimits).is_ok());
}

TEST(OpenAiRequest, LimitsValidate) {
  EXPECT_TRUE(ProtocolLimits{}.validate().is_ok());
  ProtocolLimits l;
  l.max_max_tokens = 8;  // below the chat default
  EXPECT_FALSE(l.validate().is_ok());
  l = {};
  l.vocab_size = -1;
  EXPECT_FALSE(l.validate().is_ok());
  l = {};
  l.max_json_depth = 1;
  EXPECT_FALSE(l.validate().is_ok());
}

// ---- model -----------------------------------------------------------------------------------

TEST(OpenAiRequest, ModelIsCheckedAgainstTheServedName) {
  ProtocolLimits limits;
  limits.served_model = "Qwen/Qwen3-8B";
  const auto absent = completion("", limits);
  ASSERT_TRUE(absent.is_ok());
  EXPECT_EQ(absent->model, "Qwen/Qwen3-8B");
  EXPECT_TRUE(completion(R"("model": "Qwen/Qwen3-8B")", limits).is_ok());

  const auto other = completion(R"("model": "gpt-4")", limits);
  expect_error(other, StatusCode::kNotFound, {"parameter 'model'", "'gpt-4'", "'Qwen/Qwen3-8B'"});
  const ProtocolError e = protocol_error(other.status());
  EXPECT_EQ(e.http_status, 404);
  EXPECT_EQ(e.param, "model");
  EXPECT_EQ(e.code, "model_not_found");
  expect_error(chat(R"("model": "gpt-4")", limits), StatusCode::kNotFound, {"'gpt-4'"});

  // Without a served name any model is accepted.
  const auto any = completion(R"("model": "anything")");
  ASSERT_TRUE(any.is_ok());
  EXPECT_EQ(any->model, "anything");
  expect_both_refuse(R"("model": 3)", "model", {"parameter 'model' must be a string, got 3"});
}

// ---- prompt ----------------------------------------------------------------------------------

TEST(OpenAiRequest, PromptForms) {
  const auto text = parse_completion_request(R"({"prompt": ["one string"]})", kLimits);
  ASSERT_TRUE(text.is_ok()) << text.status().to_string();
  EXPECT_EQ(text->prompt_text, "one string");

  const auto ids = parse_completion_request(R"({"prompt": [1, 2, 151935]})", kLimits);
  ASSERT_TRUE(ids.is_ok()) << ids.status().to_string();
  EXPECT_TRUE(ids->prompt_is_tokens());
  EXPECT_TRUE(ids->prompt_text.empty());
  EXPECT_EQ(ids->prompt_token_ids, (std::vector<int32_t>{1, 2, 151935}));

  const auto nested = parse_completion_request(R"({"prompt": [[7, 0]]})", kLimits);
  ASSERT_TRUE(nested.is_ok()) << nested.status().to_string();
  EXPECT_EQ(nested->prompt_token_ids, (std::vector<int32_t>{7, 0}));

  // Whole floats are token ids too, first or not, as every integer field takes them.
  const auto floats = parse_completion_request(R"({"prompt": [[7.0, 0, 3.0]]})", kLimits);
  ASSERT_TRUE(floats.is_ok()) << floats.status().to_string();
  EXPECT_EQ(floats->prompt_token_ids, (std::vector<int32_t>{7, 0, 3}));
  const auto first_float = parse_completion_request(R"({"prompt": [1.0, 2]})", kLimits);
  ASSERT_TRUE(first_float.is_ok()) << first_float.status().to_string();
  EXPECT_EQ(first_float->prompt_token_ids, (std::vector<int32_t>{1, 2}));
}

TEST(OpenAiRequest, BadPrompts) {
  auto refuse = [](std::string_view body, std::string_view param, std::initializer_list<std::string_view> needles,
                   StatusCode code = StatusCode::kInvalidArgument) {
    SCOPED_TRACE(std::string(body));
    const auto r = parse_completion_request(body, kLimits);
    expect_error(r, code, needles);
    if (!r.is_ok()) {
      EXPECT_EQ(protocol_error(r.status()).param, param);
    }
  };
  refuse(R"({"max_tokens": 5})", "prompt", {"parameter 'prompt' is required"});
  refuse(R"({"prompt": null})", "prompt", {"is required"});
  refuse(R"({"prompt": ""})", "prompt", {"must not be empty"});
  refuse(R"({"prompt": []})", "prompt", {"must not be empty"});
  refuse(R"({"prompt": [[]]})", "prompt[0]", {"must not be empty"});
  refuse(R"({"prompt": [""]})", "prompt[0]", {"must not be empty"});
  refuse(R"({"prompt": 5})", "prompt", {"must be a string, an array of token ids", "got 5"});
  refuse(R"({"prompt": {"text": "a"}})", "prompt", {"got an object"});
  refuse(R"({"prompt": ["a", "b"]})", "prompt", {"holds 2 prompts", "batch prompts are not supported"});
  refuse(R"({"prompt": [[1], [2], [3]]})", "prompt", {"holds 3 prompts", "not supported"});
  refuse(R"({"prompt": [1, "a"]})", "prompt[1]", {"must be an integer token id", "the string 'a'"});
  refuse(R"({"prompt": [1, 2.5]})", "prompt[1]", {"integer token id", "got 2.5"});
  refuse(R"({"prompt": [2.5]})", "prompt[0]", {"got 2.5"});
  refuse(R"({"prompt": [-1.0]})", "prompt[0]", {"token id in [0, 2147483648)", "got -1.0"});
  refuse(R"({"prompt": [-1]})", "prompt[0]", {"token id in [0, 2147483648)", "got -1"});
  refuse(R"({"prompt": [2147483648]})", "prompt[0]", {"got 2147483648"});
  refuse(R"({"prompt": [[1, "x"]]})", "prompt[0][1]", {"integer token id"});
  refuse(R"({"prompt": [true]})", "prompt[0]", {"got true"});
  refuse(R"({"prompt": [null]})", "prompt[0]", {"got null"});
}

TEST(OpenAiRequest, PromptLimits) {
  ProtocolLimits limits;
  limits.max_prompt_tokens = 3;
  limits.max_prompt_bytes = 5;
  limits.vocab_size = 100;
  EXPECT_TRUE(parse_completion_request(R"({"prompt": [1, 2, 99]})", limits).is_ok());
  expect_error(parse_completion_request(R"({"prompt": [1, 2, 3, 4]})", limits), StatusCode::kOutOfRange,
               {"parameter 'prompt' holds 4 tokens", "limit of 3"});
  expect_error(parse_completion_request(R"({"prompt": [[1, 2, 3, 4]]})", limits), StatusCode::kOutOfRange,
               {"parameter 'prompt[0]'"});
  expect_error(parse_completion_request(R"({"prompt": [100]})", limits), StatusCode::kInvalidArgument,
               {"token id in [0, 100)", "got 100"});
  EXPECT_TRUE(parse_completion_request(R"({"prompt": "12345"})", limits).is_ok());
  const auto long_text = parse_completion_request(R"({"prompt": "123456"})", limits);
  expect_error(long_text, StatusCode::kOutOfRange, {"is 6 bytes", "limit of 5"});
  EXPECT_EQ(protocol_error(long_text.status()).http_status, 400);
}

// ---- messages --------------------------------------------------------------------------------

TEST(OpenAiRequest, ChatMessages) {
  const auto r = parse_chat_request(R"({"messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "developer", "content": "dev"},
      {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}],
       "name": "alice"},
      {"role": "assistant", "content": "ok", "tool_calls": []}]})",
                                    kLimits);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  // What the template reads: roles (developer as system), joined text parts, names; nothing else.
  EXPECT_EQ(r->messages, nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "Be brief."},
      {"role": "system", "content": "dev"},
      {"role": "user", "content": "part one\npart two", "name": "alice"},
      {"role": "assistant", "content": "ok"}])"));
  EXPECT_EQ(r->params.max_tokens, kLimits.default_chat_max_tokens);
  EXPECT_TRUE(r->add_generation_prompt);
  EXPECT_TRUE(r->chat_template_kwargs.empty());
}

TEST(OpenAiRequest, ChatTemplateOptions) {
  const auto r = chat(R"("chat_template_kwargs": {"enable_thinking": false, "x": [1]}, "add_generation_prompt": false)");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->chat_template_kwargs, nlohmann::ordered_json::parse(R"({"enable_thinking": false, "x": [1]})"));
  // Keys keep the order they were sent in: a template's tojson prints them so.
  EXPECT_EQ(chat(R"("chat_template_kwargs": {"z": 1, "a": 2})")->chat_template_kwargs.dump(), R"({"z":1,"a":2})");
  EXPECT_FALSE(r->add_generation_prompt);
  const auto thinking = parse_chat_request(R"({"messages": [{"role": "assistant", "content": "a",
      "reasoning_content": "because"}]})", kLimits);
  ASSERT_TRUE(thinking.is_ok()) << thinking.status().to_string();
  EXPECT_EQ(thinking->messages[0].at("reasoning_content"), "because");
  expect_error(chat(R"("chat_template_kwargs": [1])"), StatusCode::kInvalidArgument,
               {"parameter 'chat_template_kwargs' must be an object"});
  expect_error(chat(R"("chat_template_kwargs": {"messages": []})"), StatusCode::kInvalidArgument,
               {"must not set 'messages'"});
  expect_error(chat(R"("chat_template": "{{ x }}")"), StatusCode::kInvalidArgument,
               {"parameter 'chat_template' is not supported"});
  expect_error(chat(R"("continue_final_message": true)"), StatusCode::kInvalidArgument,
               {"parameter 'continue_final_message' is not supported"});
}

TEST(OpenAiRequest, BadMessages) {
  auto refuse = [](std::string_view messages, std::string_view param, std::initializer_list<std::string_view> needles,
                   StatusCode code = StatusCode::kInvalidArgument) {
    SCOPED_TRACE(std::string(messages));
    std::string body = "{";
    if (!messages.empty()) body += R"("messages": )" + std::string(messages);
    body += "}";
    const auto r = parse_chat_request(body, kLimits);
    expect_error(r, code, needles);
    if (!r.is_ok()) {
      EXPECT_EQ(protocol_error(r.status()).param, param);
    }
  };
  refuse("", "messages", {"parameter 'messages' is required"});
  refuse("[]", "messages", {"must not be empty"});
  refuse(R"("hi")", "messages", {"must be an array", "the string 'hi'"});
  refuse(R"(["hi"])", "messages[0]", {"must be an object"});
  refuse(R"([{"content": "x"}])", "messages[0].role", {"is required"});
  refuse(R"([{"role": 1, "content": "x"}])", "messages[0].role", {"must be a string"});
  refuse(R"([{"role": "robot", "content": "x"}])", "messages[0].role", {"must be one of", "'robot'"});
  refuse(R"([{"role": "user", "content": "a"}, {"role": "tool", "content": "x"}])", "messages[1].role",
         {"not supported", "tool calling"});
  refuse(R"([{"role": "user"}])", "messages[0].content", {"is required"});
  refuse(R"([{"role": "user", "content": null}])", "messages[0].content", {"is required"});
  refuse(R"([{"role": "user", "content": 5}])", "messages[0].content", {"string or an array of text parts"});
  refuse(R"([{"role": "user", "content": []}])", "messages[0].content", {"must not be an empty array"});
  refuse(R"([{"role": "user", "content": ["x"]}])", "messages[0].content[0]", {"must be an object"});
  refuse(R"([{"role": "user", "content": [{"text": "x"}]}])", "messages[0].content[0].type", {"is required"});
  refuse(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}])",
         "messages[0].content[0].type", {"'image_url'", "only text parts"});
  refuse(R"([{"role": "user", "content": [{"type": "text"}]}])", "messages[0].content[0].text", {"is required"});
  refuse(R"([{"role": "user", "content": [{"type": "text", "text": 3}]}])", "messages[0].content[0].text",
         {"must be a string"});
  refuse(R"([{"role": "assistant", "content": "x", "tool_calls": [{"id": "1"}]}])", "messages[0].tool_calls",
         {"not supported"});
  refuse(R"([{"role": "user", "content": "x", "name": 7}])", "messages[0].name", {"must be a string"});
}

TEST(OpenAiRequest, ChatContentLimits) {
  ProtocolLimits limits;
  limits.max_prompt_bytes = 6;
  limits.max_messages = 2;
  EXPECT_TRUE(parse_chat_request(
                  R"({"messages": [{"role": "user", "content": "abc"}, {"role": "user", "content": "def"}]})", limits)
                  .is_ok());
  expect_error(parse_chat_request(
                   R"({"messages": [{"role": "user", "content": "abc"}, {"role": "user", "content": "defg"}]})",
                   limits),
               StatusCode::kOutOfRange, {"parameter 'messages' hold more than 6 bytes"});
  expect_error(parse_chat_request(R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content":
                                   "b"}, {"role": "user", "content": "c"}]})",
                                  limits),
               StatusCode::kOutOfRange, {"holds 3 messages", "limit of 2"});
}

// ---- max_tokens ------------------------------------------------------------------------------

TEST(OpenAiRequest, MaxTokens) {
  ASSERT_TRUE(completion(R"("max_tokens": 1)").is_ok());
  EXPECT_EQ(completion(R"("max_tokens": 32768)")->params.max_tokens, 32768);
  expect_both_refuse(R"("max_tokens": 0)", "max_tokens", {"must be at least 1", "got 0"});
  expect_both_refuse(R"("max_tokens": -5)", "max_tokens", {"must be at least 1"});
  expect_both_refuse(R"("max_tokens": 32769)", "max_tokens", {"is 32769", "limit of 32768"},
                     StatusCode::kOutOfRange);
  expect_both_refuse(R"("max_tokens": 1e30)", "max_tokens", {"must be an integer"});
  EXPECT_EQ(completion(R"("max_tokens": 10.0)")->params.max_tokens, 10);
  expect_both_refuse(R"("max_tokens": 10.5)", "max_tokens", {"must be an integer", "got 10.5"});
  expect_both_refuse(R"("max_tokens": 40000.0)", "max_tokens", {"is 40000", "limit of 32768"}, StatusCode::kOutOfRange);
  expect_both_refuse(R"("max_tokens": "10")", "max_tokens", {"must be an integer", "the string '10'"});
  expect_both_refuse(R"("max_tokens": 99999999999999999999)", "max_tokens", {"must be an integer"});
  // Past int64 but a JSON unsigned: the limit, not a range of negative numbers.
  expect_both_refuse(R"("max_tokens": 9223372036854775808)", "max_tokens", {"is 9223372036854775808", "limit of 32768"},
                     StatusCode::kOutOfRange);
}

TEST(OpenAiRequest, ChatMaxCompletionTokens) {
  EXPECT_EQ(chat(R"("max_completion_tokens": 7)")->params.max_tokens, 7);
  EXPECT_EQ(chat(R"("max_tokens": 9)")->params.max_tokens, 9);
  EXPECT_EQ(chat(R"("max_tokens": 9, "max_completion_tokens": 9)")->params.max_tokens, 9);
  const auto both = chat(R"("max_tokens": 9, "max_completion_tokens": 8)");
  expect_error(both, StatusCode::kInvalidArgument, {"is 8 but max_tokens is 9", "send one of them"});
  EXPECT_EQ(protocol_error(both.status()).param, "max_completion_tokens");
  expect_error(chat(R"("max_completion_tokens": 0)"), StatusCode::kInvalidArgument,
               {"parameter 'max_completion_tokens' must be at least 1"});
  // /v1/completions does not know max_completion_tokens: ignored like any unknown field.
  EXPECT_EQ(completion(R"("max_completion_tokens": 0)")->params.max_tokens, 16);
}

// ---- sampling --------------------------------------------------------------------------------

TEST(OpenAiRequest, Temperature) {
  EXPECT_EQ(*completion(R"("temperature": 0)")->params.temperature, 0.0);
  EXPECT_EQ(*chat(R"("temperature": 2)")->params.temperature, 2.0);
  EXPECT_DOUBLE_EQ(*chat(R"("temperature": 0.25)")->params.temperature, 0.25);
  expect_both_refuse(R"("temperature": -0.1)", "temperature", {"must be a number in [0, 2]", "got -0.1"});
  expect_both_refuse(R"("temperature": 2.0001)", "temperature", {"[0, 2]", "got 2.0001"});
  expect_both_refuse(R"("temperature": "hot")", "temperature", {"must be a number", "the string 'hot'"});
  expect_both_refuse(R"("temperature": true)", "temperature", {"must be a number", "got true"});
}

TEST(OpenAiRequest, TopP) {
  EXPECT_EQ(*completion(R"("top_p": 1)")->params.top_p, 1.0);
  EXPECT_DOUBLE_EQ(*completion(R"("top_p": 1e-3)")->params.top_p, 1e-3);
  expect_both_refuse(R"("top_p": 0)", "top_p", {"must be a number in (0, 1]", "got 0"});
  expect_both_refuse(R"("top_p": 1.5)", "top_p", {"(0, 1]", "got 1.5"});
  expect_both_refuse(R"("top_p": [1])", "top_p", {"must be a number", "got an array"});
  // In (0, 1] as a double but 0 as the sampler's float: refused here, naming the parameter.
  expect_both_refuse(R"("top_p": 1e-46)", "top_p", {"(0, 1]", "got 1e-46"});
  EXPECT_TRUE(completion(R"("top_p": 1e-30)").is_ok());
}

TEST(OpenAiRequest, TopK) {
  EXPECT_EQ(completion(R"("top_k": -1)")->params.top_k, -1);
  EXPECT_EQ(completion(R"("top_k": 1)")->params.top_k, 1);
  EXPECT_EQ(chat(R"("top_k": 2147483647)")->params.top_k, 2147483647);
  expect_both_refuse(R"("top_k": 0)", "top_k", {"-1 (all tokens) or at least 1, got 0"});
  expect_both_refuse(R"("top_k": -2)", "top_k", {"must be an integer in [-1, 2147483647]", "got -2"});
  expect_both_refuse(R"("top_k": 2147483648)", "top_k", {"must be an integer in"});
  expect_both_refuse(R"("top_k": 5.5)", "top_k", {"must be an integer", "got 5.5"});
  // An integral float is its integer, as a pydantic request model takes it; the
  // range still holds, and a refusal shows the float as it was sent.
  EXPECT_EQ(completion(R"("top_k": 5.0)")->params.top_k, 5);
  EXPECT_EQ(chat(R"("top_k": -1.0)")->params.top_k, -1);
  expect_both_refuse(R"("top_k": -2.0)", "top_k", {"must be an integer in [-1, 2147483647]", "got -2.0"});
  expect_both_refuse(R"("top_k": 1e300)", "top_k", {"must be an integer", "got 1e+300"});
  expect_both_refuse(R"("top_k": 2147483648.0)", "top_k", {"must be an integer in", "got 2147483648.0"});
}

TEST(OpenAiRequest, Seed) {
  EXPECT_EQ(completion(R"("seed": 0)")->params.seed, std::optional<uint64_t>(0));
  EXPECT_EQ(chat(R"("seed": 42)")->params.seed, std::optional<uint64_t>(42));
  expect_both_refuse(R"("seed": -1)", "seed", {"must be an integer in [0, 2^64)", "got -1"});
  expect_both_refuse(R"("seed": 18446744073709551616)", "seed", {"must be an integer"});
  expect_both_refuse(R"("seed": 1.5)", "seed", {"must be an integer", "got 1.5"});
  EXPECT_EQ(completion(R"("seed": 7.0)")->params.seed, std::optional<uint64_t>(7));
  EXPECT_EQ(completion(R"("seed": -0.0)")->params.seed, std::optional<uint64_t>(0));
  EXPECT_EQ(chat(R"("seed": 1e19)")->params.seed, std::optional<uint64_t>(10000000000000000000u));
  expect_both_refuse(R"("seed": -7.0)", "seed", {"must be an integer in [0, 2^64)", "got -7.0"});
  expect_both_refuse(R"("seed": 2e19)", "seed", {"must be an integer", "got 2e+19"});
  expect_both_refuse(R"("seed": "7")", "seed", {"must be an integer"});
}

TEST(OpenAiRequest, Stop) {
  EXPECT_EQ(completion(R"("stop": "END")")->params.stop, (std::vector<std::string>{"END"}));
  EXPECT_EQ(chat(R"("stop": ["a", "b", "c", "d"])")->params.stop, (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_TRUE(completion(R"("stop": [])")->params.stop.empty());
  expect_both_refuse(R"("stop": ["a", "b", "c", "d", "e"])", "stop", {"holds 5 strings", "at most 4"},
                     StatusCode::kOutOfRange);
  expect_both_refuse(R"("stop": "")", "stop", {"must not be an empty string"});
  expect_both_refuse(R"("stop": ["a", ""])", "stop[1]", {"must not be an empty string"});
  expect_both_refuse(R"("stop": ["a", 3])", "stop[1]", {"must be a string", "got 3"});
  expect_both_refuse(R"("stop": 3)", "stop", {"must be a string or an array of strings"});
  expect_both_refuse(R"("stop": {"s": 1})", "stop", {"got an object"});
  const std::string long_stop = R"("stop": ")" + std::string(257, 'x') + "\"";
  expect_both_refuse(long_stop, "stop", {"is 257 bytes", "limit of 256"}, StatusCode::kOutOfRange);
}

TEST(OpenAiRequest, StopTokenIds) {
  EXPECT_EQ(completion(R"("stop_token_ids": [0, 5])")->params.stop_token_ids, (std::vector<int32_t>{0, 5}));
  expect_both_refuse(R"("stop_token_ids": 5)", "stop_token_ids", {"must be an array of token ids"});
  expect_both_refuse(R"("stop_token_ids": [1, -2])", "stop_token_ids[1]", {"token id"});
  EXPECT_EQ(chat(R"("stop_token_ids": [4.0])")->params.stop_token_ids, (std::vector<int32_t>{4}));
  std::string many = R"("stop_token_ids": [0)";
  for (int i = 1; i <= 64; ++i) many += ", " + std::to_string(i);
  expect_both_refuse(many + "]", "stop_token_ids", {"holds 65 ids", "limit of 64"}, StatusCode::kOutOfRange);
}

TEST(OpenAiRequest, IgnoreEos) {
  EXPECT_TRUE(completion(R"("ignore_eos": true)")->params.ignore_eos);
  expect_both_refuse(R"("ignore_eos": 1)", "ignore_eos", {"must be true or false", "got 1"});
}

// ---- streaming -------------------------------------------------------------------------------

TEST(OpenAiRequest, StreamAndStreamOptions) {
  EXPECT_TRUE(completion(R"("stream": true)")->params.stream);
  EXPECT_FALSE(completion(R"("stream": true)")->params.include_usage);
  EXPECT_FALSE(chat(R"("stream": false)")->params.stream);
  const auto usage = chat(R"("stream": true, "stream_options": {"include_usage": true, "continuous_usage_stats": 1})");
  ASSERT_TRUE(usage.is_ok()) << usage.status().to_string();
  EXPECT_TRUE(usage->params.include_usage);
  EXPECT_FALSE(chat(R"("stream": true, "stream_options": {})")->params.include_usage);
  expect_both_refuse(R"("stream": "yes")", "stream", {"must be true or false", "the string 'yes'"});
  expect_both_refuse(R"("stream_options": {"include_usage": true})", "stream_options",
                     {"only allowed when 'stream' is true"});
  expect_both_refuse(R"("stream": true, "stream_options": true)", "stream_options", {"must be an object"});
  expect_both_refuse(R"("stream": true, "stream_options": {"include_usage": "yes"})",
                     "stream_options.include_usage", {"must be true or false"});
}

// ---- known but unsupported parameters --------------------------------------------------------

TEST(OpenAiRequest, UnsupportedParametersPassOnlyAtTheirDefaults) {
  for (std::string_view ok : {R"("presence_penalty": 0)", R"("frequency_penalty": 0.0)",
                              R"("repetition_penalty": 1.0)", R"("min_p": 0)", R"("min_tokens": 0)",
                              R"("logit_bias": {})"}) {
    EXPECT_TRUE(completion(ok).is_ok()) << ok;
    EXPECT_TRUE(chat(ok).is_ok()) << ok;
  }
  expect_both_refuse(R"("presence_penalty": 0.5)", "presence_penalty", {"not supported", "got 0.5"});
  expect_both_refuse(R"("frequency_penalty": -1)", "frequency_penalty", {"not supported", "got -1"});
  expect_both_refuse(R"("frequency_penalty": "x")", "frequency_penalty", {"must be a number"});
  expect_both_refuse(R"("repetition_penalty": 1.1)", "repetition_penalty", {"not supported", "got 1.1"});
  expect_both_refuse(R"("min_p": 0.1)", "min_p", {"not supported"});
  expect_both_refuse(R"("min_tokens": 3)", "min_tokens", {"not supported"});
  expect_both_refuse(R"("logit_bias": {"50256": -100})", "logit_bias", {"not supported", "empty object"});
  expect_both_refuse(R"("logit_bias": [1])", "logit_bias", {"must be an object"});
  expect_both_refuse(R"("user": 5)", "user", {"must be a string"});
}

TEST(OpenAiRequest, ChoicesN) {
  EXPECT_EQ(completion(R"("n": 3)")->params.n, 3);
  EXPECT_EQ(chat(R"("n": 16)")->params.n, 16);
  expect_both_refuse(R"("n": 0)", "n", {"must be an integer in [1, 16]", "got 0"});
  expect_both_refuse(R"("n": 17)", "n", {"[1, 16]"});
  expect_both_refuse(R"("n": "2")", "n", {"must be an integer"});
  EXPECT_TRUE(completion(R"("n": 2, "best_of": 2)").is_ok());
  expect_error(completion(R"("n": 2, "best_of": 3)"), StatusCode::kInvalidArgument,
               {"parameter 'best_of' is not supported", "equal to n"});
}

TEST(OpenAiRequest, CompletionLogprobsAndEcho) {
  const auto r = completion(R"("logprobs": 5, "echo": true, "add_special_tokens": false)");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->params.logprobs, 5);
  EXPECT_TRUE(r->echo);
  EXPECT_FALSE(r->add_special_tokens);
  EXPECT_EQ(completion(R"("logprobs": 0)")->params.logprobs, 0);
  expect_error(completion(R"("logprobs": 21)"), StatusCode::kInvalidArgument,
               {"parameter 'logprobs' must be an integer in [0, 20]"});
  expect_error(completion(R"("logprobs": true)"), StatusCode::kInvalidArgument, {"must be an integer"});
  expect_error(completion(R"("echo": 1)"), StatusCode::kInvalidArgument, {"must be true or false"});
}

TEST(OpenAiRequest, ChatLogprobs) {
  EXPECT_EQ(chat(R"("logprobs": true)")->params.logprobs, 0);
  EXPECT_EQ(chat(R"("logprobs": true, "top_logprobs": 20)")->params.logprobs, 20);
  EXPECT_EQ(chat(R"("logprobs": false)")->params.logprobs, -1);
  expect_error(chat(R"("top_logprobs": 3)"), StatusCode::kInvalidArgument,
               {"parameter 'top_logprobs' needs 'logprobs': true"});
  expect_error(chat(R"("logprobs": true, "top_logprobs": 21)"), StatusCode::kInvalidArgument, {"[0, 20]"});
  expect_error(chat(R"("logprobs": 1)"), StatusCode::kInvalidArgument, {"must be true or false"});
}

TEST(OpenAiRequest, TokenizeAndDetokenize) {
  const auto text = parse_tokenize_request(R"({"prompt": "hi", "add_special_tokens": false, "return_token_strs": true})",
                                           kLimits);
  ASSERT_TRUE(text.is_ok()) << text.status().to_string();
  EXPECT_EQ(text->prompt, std::optional<std::string>("hi"));
  EXPECT_FALSE(text->add_special_tokens);
  EXPECT_TRUE(text->return_token_strs);
  EXPECT_EQ(parse_tokenize_request(R"({"text": "x"})", kLimits)->prompt, std::optional<std::string>("x"));
  const auto conv = parse_tokenize_request(
      R"({"messages": [{"role": "user", "content": "q"}], "add_generation_prompt": false,
          "chat_template_kwargs": {"enable_thinking": false}})",
      kLimits);
  ASSERT_TRUE(conv.is_ok()) << conv.status().to_string();
  ASSERT_TRUE(conv->chat.has_value());
  EXPECT_FALSE(conv->chat->add_generation_prompt);
  EXPECT_EQ(conv->chat->messages.size(), 1u);
  expect_error(parse_tokenize_request(R"({})", kLimits), StatusCode::kInvalidArgument, {"'prompt'", "'messages'"});
  expect_error(parse_tokenize_request(R"({"prompt": "a", "messages": []})", kLimits), StatusCode::kInvalidArgument,
               {"only one of them"});
  expect_error(parse_tokenize_request(R"({"prompt": 5})", kLimits), StatusCode::kInvalidArgument,
               {"parameter 'prompt' must be a string"});

  ProtocolLimits small = kLimits;
  small.vocab_size = 100;
  const auto ids = parse_detokenize_request(R"({"tokens": [1, 2, 99]})", small);
  ASSERT_TRUE(ids.is_ok()) << ids.status().to_string();
  EXPECT_EQ(ids->tokens, (std::vector<int32_t>{1, 2, 99}));
  expect_error(parse_detokenize_request(R"({"tokens": [100]})", small), StatusCode::kInvalidArgument,
               {"parameter 'tokens[0]'", "[0, 100)"});
  expect_error(parse_detokenize_request(R"({"tokens": "1"})", small), StatusCode::kInvalidArgument,
               {"must be an array"});
  expect_error(parse_detokenize_request(R"({})", small), StatusCode::kInvalidArgument, {"'tokens' is required"});
}

TEST(OpenAiRequest, CompletionOnlyUnsupportedParameters) {
  EXPECT_TRUE(completion(R"("echo": false, "best_of": 1, "suffix": "")").is_ok());
  auto refuse = [](std::string_view extra, std::string_view param, std::initializer_list<std::string_view> needles) {
    SCOPED_TRACE(std::string(extra));
    const auto r = completion(extra);
    expect_error(r, StatusCode::kInvalidArgument, needles);
    if (!r.is_ok()) {
      EXPECT_EQ(protocol_error(r.status()).param, param);
    }
  };
  refuse(R"("best_of": 3)", "best_of", {"not supported"});
  refuse(R"("suffix": "tail")", "suffix", {"not supported"});
  refuse(R"("suffix": 1)", "suffix", {"must be a string"});
}

TEST(OpenAiRequest, ChatOnlyUnsupportedParameters) {
  EXPECT_TRUE(chat(R"("logprobs": false, "top_logprobs": 0, "tools": [], "tool_choice": "none",
                      "function_call": "auto", "response_format": {"type": "text"}, "modalities": ["text"],
                      "audio": null, "prediction": null, "reasoning_effort": null, "verbosity": null)")
                  .is_ok());
  auto refuse = [](std::string_view extra, std::string_view param, std::initializer_list<std::string_view> needles) {
    SCOPED_TRACE(std::string(extra));
    const auto r = chat(extra);
    expect_error(r, StatusCode::kInvalidArgument, needles);
    if (!r.is_ok()) {
      EXPECT_EQ(protocol_error(r.status()).param, param);
    }
  };
  refuse(R"("tools": [{"type": "function", "function": {"name": "f"}}])", "tools", {"tool calling"});
  refuse(R"("tools": {})", "tools", {"must be an array"});
  refuse(R"("functions": [{"name": "f"}])", "functions", {"tool calling"});
  refuse(R"("tool_choice": "required")", "tool_choice", {"only 'none' and 'auto'"});
  refuse(R"("tool_choice": {"type": "function"})", "tool_choice", {"not supported"});
  refuse(R"("tool_choice": 1)", "tool_choice", {"must be a string or an object"});
  refuse(R"("response_format": {"type": "json_object"})", "response_format.type", {"'json_object'"});
  refuse(R"("response_format": "json")", "response_format", {"must be an object"});
  // Outputs other than text are refused, not answered with plain text.
  refuse(R"("modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"})", "modalities",
         {"only \"text\""});
  refuse(R"("modalities": "text")", "modalities", {"must be an array"});
  refuse(R"("audio": {"voice": "alloy", "format": "wav"})", "audio", {"not implemented"});
  refuse(R"("prediction": {"type": "content", "content": "x"})", "prediction", {"not implemented"});
  refuse(R"("web_search_options": {})", "web_search_options", {"not implemented"});
  refuse(R"("reasoning_effort": "high")", "reasoning_effort", {"enable_thinking"});
  refuse(R"("verbosity": "low")", "verbosity", {"only null"});
}

TEST(OpenAiRequest, LongStringsAreCutInMessages) {
  const std::string body = R"({"prompt": "a", "temperature": ")" + std::string(10000, 'x') + "\"}";
  const auto r = parse_completion_request(body, kLimits);
  ASSERT_FALSE(r.is_ok());
  EXPECT_LT(r.status().message().size(), 200u);
  EXPECT_TRUE(contains(r.status().message(), "xxx...'"));
}

// ---- errors ----------------------------------------------------------------------------------

TEST(ProtocolErrors, StatusMapsToHttpStatusAndType) {
  struct Case {
    Status status;
    int http;
    std::string_view type;
  };
  const Case cases[] = {
      {invalid_argument("m"), 400, "invalid_request_error"},
      {out_of_range("m"), 400, "invalid_request_error"},
      {not_found("m"), 404, "invalid_request_error"},
      {resource_exhausted("m"), 503, "service_unavailable_error"},
      {unavailable("m"), 503, "service_unavailable_error"},
      {failed_precondition("m"), 400, "invalid_request_error"},  // e.g. /flush_cache while requests run
      {data_loss("m"), 500, "server_error"},
      {internal_error("m"), 500, "server_error"},
  };
  for (const Case& c : cases) {
    const ProtocolError e = protocol_error(c.status);
    EXPECT_EQ(e.http_status, c.http) << c.status.to_string();
    EXPECT_EQ(e.type, c.type) << c.status.to_string();
    EXPECT_EQ(e.message, "m");
    EXPECT_EQ(e.param, "");
    EXPECT_EQ(e.code, "");
  }
  const ProtocolError rate = protocol_error(resource_exhausted("too many requests from this key"), 429);
  EXPECT_EQ(rate.http_status, 429);
  EXPECT_EQ(rate.type, "rate_limit_error");
  const ProtocolError ok = protocol_error(Status::ok());
  EXPECT_EQ(ok.http_status, 500);
  EXPECT_FALSE(ok.message.empty());
}

TEST(ProtocolErrors, ParamComesFromTheMessagePrefix) {
  EXPECT_EQ(protocol_error(invalid_argument("parameter 'top_p' must be ...")).param, "top_p");
  EXPECT_EQ(protocol_error(invalid_argument("parameter 'messages[3].content[0].type' is ...")).param,
            "messages[3].content[0].type");
  EXPECT_EQ(protocol_error(invalid_argument("the parameter 'x' is not at the start")).param, "");
  EXPECT_EQ(protocol_error(invalid_argument("parameter 'unterminated")).param, "");
  // A 404 that is not about the model gets no code.
  EXPECT_EQ(protocol_error(not_found("no such route")).code, "");
}

// A prompt that leaves no room to generate carries OpenAI's code, which
// clients look for to trim the conversation; other 400s do not.
TEST(ProtocolErrors, APromptOverTheContextGetsContextLengthExceeded) {
  const ProtocolError e = protocol_error(invalid_argument(
      "parameter 'messages': 310 tokens " + std::string(kContextLengthExceeded) + " 300"));
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "messages");
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_EQ(protocol_error(invalid_argument("parameter 'prompt': the prompt has no tokens")).code, "");
}

TEST(ProtocolErrors, BodyHasOpenAisShape) {
  const json with_param = json::parse(error_body(
      {.http_status = 400, .type = "invalid_request_error", .param = "top_p", .message = "bad \"x\"\n", .code = ""}));
  ASSERT_EQ(with_param.size(), 1u);
  const json& e = with_param.at("error");
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e.at("message"), "bad \"x\"\n");
  EXPECT_EQ(e.at("type"), "invalid_request_error");
  EXPECT_EQ(e.at("param"), "top_p");
  EXPECT_TRUE(e.at("code").is_null());

  const json no_param =
      json::parse(error_body({.http_status = 404, .type = "invalid_request_error", .param = "model",
                              .message = "m", .code = "model_not_found"}));
  EXPECT_EQ(no_param.at("error").at("code"), "model_not_found");
  const json server = json::parse(error_body(protocol_error(internal_error("boom"))));
  EXPECT_TRUE(server.at("error").at("param").is_null());
  EXPECT_EQ(server.at("error").at("type"), "server_error");
  // Exactly the bytes a client sees, key order included.
  EXPECT_EQ(error_body(protocol_error(invalid_argument("parameter 'n' is not supported by this server: x"))),
            R"({"error":{"message":"parameter 'n' is not supported by this server: x",)"
            R"("type":"invalid_request_error","param":"n","code":null}})");
}

TEST(ProtocolErrors, ParseErrorsRoundTripToBodies) {
  const auto r = parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "top_k": 0})", kLimits);
  ASSERT_FALSE(r.is_ok());
  const ProtocolError e = protocol_error(r.status());
  const json body = json::parse(error_body(e));
  EXPECT_EQ(body["error"]["param"], "top_k");
  EXPECT_EQ(body["error"]["message"], r.status().message());
}

// ---- whole responses -------------------------------------------------------------------------

const ResponseMeta kMeta{.id = "cmpl-abc", .model = "qwen3", .created = 1700000000};
const Usage kUsage{.prompt_tokens = 10, .completion_tokens = 4, .cached_tokens_device = 3, .cached_tokens_host = 5};

Choice choice(std::string text, FinishReason finish = FinishReason::kStop,
              std::optional<std::vector<int32_t>> token_ids = std::nullopt) {
  Choice c;
  c.text = std::move(text);
  c.finish_reason = finish;
  c.token_ids = std::move(token_ids);
  return c;
}

void expect_usage(const json& u) {
  ASSERT_EQ(u.size(), 5u) << u.dump();
  EXPECT_EQ(u.at("prompt_tokens"), 10);
  EXPECT_EQ(u.at("completion_tokens"), 4);
  EXPECT_EQ(u.at("total_tokens"), 14);
  EXPECT_EQ(u.at("prompt_tokens_details"), json({{"cached_tokens", 8}}));
  EXPECT_EQ(u.at("hiq_cached_tokens_by_tier"), json({{"device", 3}, {"host", 5}}));
}

TEST(OpenAiResponse, Completion) {
  const json j = json::parse(completion_response(kMeta, choice("Hi there", FinishReason::kLength), kUsage));
  ASSERT_EQ(j.size(), 6u) << j.dump();
  EXPECT_EQ(j.at("id"), "cmpl-abc");
  EXPECT_EQ(j.at("object"), "text_completion");
  EXPECT_EQ(j.at("created"), 1700000000);
  EXPECT_EQ(j.at("model"), "qwen3");
  ASSERT_EQ(j.at("choices").size(), 1u);
  const json& c = j["choices"][0];
  ASSERT_EQ(c.size(), 4u) << c.dump();
  EXPECT_EQ(c.at("index"), 0);
  EXPECT_EQ(c.at("text"), "Hi there");
  EXPECT_TRUE(c.at("logprobs").is_null());
  EXPECT_EQ(c.at("finish_reason"), "length");
  expect_usage(j.at("usage"));
}

// Completions' top_logprobs always hold the sampled token, as OpenAI's do (up
// to logprobs + 1 entries), so a client can look its own token up; chat keeps
// the sampled token apart and its list at the top k.
TEST(OpenAiResponse, CompletionTopLogprobsHoldTheSampledToken) {
  const auto entry = [](std::string token, float logprob, std::vector<LogprobToken> top) {
    LogprobEntry e;
    e.chosen = {std::move(token), logprob};
    e.top = std::move(top);
    return e;
  };
  Choice c = choice("ab");
  c.logprobs = std::vector<LogprobEntry>{entry("a", -0.5f, {{"a", -0.5f}, {"z", -1.0f}}),  // sampled among the top
                                         entry("b", -3.0f, {{"y", -0.25f}}),                // sampled outside it
                                         entry("c", -0.125f, {})};                          // logprobs: 0
  const json j = json::parse(completion_response(kMeta, std::span(&c, 1), kUsage));
  const json& tops = j["choices"][0]["logprobs"]["top_logprobs"];
  ASSERT_EQ(tops.size(), 3u) << tops.dump();
  EXPECT_EQ(tops[0], json({{"a", -0.5}, {"z", -1.0}}));
  EXPECT_EQ(tops[1], json({{"y", -0.25}, {"b", -3.0}}));
  EXPECT_EQ(tops[2], json({{"c", -0.125}}));
  const json chat = json::parse(chat_response(kMeta, std::span(&c, 1), kUsage));
  EXPECT_EQ(chat["choices"][0]["logprobs"]["content"][1]["top_logprobs"].size(), 1u);
}

TEST(OpenAiResponse, CompletionKeyOrderIsOpenAis) {
  EXPECT_EQ(completion_response({.id = "cmpl-1", .model = "m", .created = 5}, choice("x"), {}),
            R"({"id":"cmpl-1","object":"text_completion","created":5,"model":"m","choices":[{"index":0,"text":"x",)"
            R"("logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":0,"completion_tokens":0,)"
            R"("total_tokens":0,"prompt_tokens_details":{"cached_tokens":0},)"
            R"("hiq_cached_tokens_by_tier":{"device":0,"host":0}}})");
}

TEST(OpenAiResponse, Chat) {
  const json j = json::parse(chat_response(kMeta, choice("Hello!", FinishReason::kStop), kUsage));
  EXPECT_EQ(j.at("object"), "chat.completion");
  const json& c = j.at("choices").at(0);
  ASSERT_EQ(c.size(), 4u) << c.dump();
  EXPECT_EQ(c.at("message"), json({{"role", "assistant"}, {"content", "Hello!"}}));
  EXPECT_FALSE(c.contains("text"));
  EXPECT_EQ(c.at("finish_reason"), "stop");
  expect_usage(j.at("usage"));
}

TEST(OpenAiResponse, TokenIdsOnlyInTokenIdMode) {
  const json with = json::parse(completion_response(kMeta, choice("ab", FinishReason::kStop, std::vector<int32_t>{5, 9}), kUsage));
  EXPECT_EQ(with["choices"][0].at("token_ids"), json({5, 9}));
  const json chat_with = json::parse(chat_response(kMeta, choice("ab", FinishReason::kStop, std::vector<int32_t>{}), kUsage));
  EXPECT_EQ(chat_with["choices"][0].at("token_ids"), json::array());
  const json without = json::parse(completion_response(kMeta, choice("ab"), kUsage));
  EXPECT_FALSE(without["choices"][0].contains("token_ids"));
}

TEST(OpenAiResponse, TextIsEscapedAndInvalidUtf8Replaced) {
  const std::string text = "quote \" backslash \\ newline \n nul " + std::string(1, '\0') + " é half \xe4\xbd";
  const std::string body = completion_response(kMeta, choice(text), kUsage);
  const json j = json::parse(body);  // valid JSON, valid UTF-8
  EXPECT_EQ(j["choices"][0]["text"], "quote \" backslash \\ newline \n nul " + std::string(1, '\0') +
                                         " é half \xef\xbf\xbd");
  EXPECT_EQ(body.find('\n'), std::string::npos);  // one line, as SSE needs
}

TEST(OpenAiResponse, FinishReasonNames) {
  EXPECT_EQ(finish_reason_name(FinishReason::kStop), "stop");
  EXPECT_EQ(finish_reason_name(FinishReason::kLength), "length");
}

// ---- streams ---------------------------------------------------------------------------------

// The JSON of one event "data: {...}\n\n".
json event_json(const std::string& event) {
  EXPECT_TRUE(event.starts_with("data: ")) << event;
  EXPECT_TRUE(event.ends_with("\n\n")) << event;
  const std::string payload = event.substr(6, event.size() - 8);
  EXPECT_EQ(payload.find('\n'), std::string::npos) << "an event's data is one line";
  return json::parse(payload);
}

TEST(OpenAiStream, CompletionChunks) {
  const StreamContext s{.meta = kMeta};
  const json first = event_json(completion_chunk(s, "Hel"));
  EXPECT_EQ(first.at("object"), "text_completion");
  EXPECT_EQ(first.at("id"), "cmpl-abc");
  EXPECT_EQ(first.at("created"), 1700000000);
  EXPECT_EQ(first.at("model"), "qwen3");
  EXPECT_FALSE(first.contains("usage"));
  const json& c = first.at("choices").at(0);
  EXPECT_EQ(c, json({{"index", 0}, {"text", "Hel"}, {"logprobs", nullptr}, {"finish_reason", nullptr}}));

  const std::vector<int32_t> ids{3};
  const json last = event_json(completion_chunk(s, "lo", FinishReason::kStop, &ids));
  EXPECT_EQ(last["choices"][0].at("text"), "lo");
  EXPECT_EQ(last["choices"][0].at("finish_reason"), "stop");
  EXPECT_EQ(last["choices"][0].at("token_ids"), json({3}));
  EXPECT_EQ(done_event(), "data: [DONE]\n\n");
}

TEST(OpenAiStream, ChatChunksRoleThenContentThenFinish) {
  const StreamContext s{.meta = {.id = "chatcmpl-1", .model = "qwen3", .created = 7}};
  const json role = event_json(chat_role_chunk(s));
  EXPECT_EQ(role.at("object"), "chat.completion.chunk");
  EXPECT_EQ(role.at("id"), "chatcmpl-1");
  EXPECT_EQ(role["choices"][0],
            json({{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                  {"finish_reason", nullptr}}));
  const json content = event_json(chat_content_chunk(s, "Hi"));
  EXPECT_EQ(content["choices"][0].at("delta"), json({{"content", "Hi"}}));
  EXPECT_TRUE(content["choices"][0].at("finish_reason").is_null());
  EXPECT_FALSE(content["choices"][0].contains("token_ids"));
  const std::vector<int32_t> ids{1, 2};
  EXPECT_EQ(event_json(chat_content_chunk(s, "x", &ids))["choices"][0].at("token_ids"), json({1, 2}));
  const json finish = event_json(chat_finish_chunk(s, FinishReason::kLength));
  EXPECT_EQ(finish["choices"][0].at("delta"), json::object());
  EXPECT_EQ(finish["choices"][0].at("finish_reason"), "length");
}

TEST(OpenAiStream, IncludeUsageAddsNullUsageAndAUsageChunk) {
  const StreamContext s{.meta = kMeta, .include_usage = true};
  for (const std::string& event : {completion_chunk(s, "a"), chat_role_chunk(s), chat_content_chunk(s, "b"),
                                   chat_finish_chunk(s, FinishReason::kStop)}) {
    const json j = event_json(event);
    ASSERT_TRUE(j.contains("usage")) << event;
    EXPECT_TRUE(j.at("usage").is_null()) << event;
  }
  const json chat_usage = event_json(usage_chunk(s, /*chat=*/true, kUsage));
  EXPECT_EQ(chat_usage.at("object"), "chat.completion.chunk");
  EXPECT_EQ(chat_usage.at("choices"), json::array());
  expect_usage(chat_usage.at("usage"));
  EXPECT_EQ(event_json(usage_chunk(s, /*chat=*/false, kUsage)).at("object"), "text_completion");
}

TEST(OpenAiStream, ExactBytesOfAChatStream) {
  const StreamContext s{.meta = {.id = "chatcmpl-9", .model = "m", .created = 1}};
  const std::string stream = chat_role_chunk(s) + chat_content_chunk(s, "ok") +
                             chat_finish_chunk(s, FinishReason::kStop) + done_event();
  const std::string head = R"({"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,"model":"m",)";
  EXPECT_EQ(stream,
            "data: " + head + R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},)"
            R"("logprobs":null,"finish_reason":null}]})" "\n\n"
            "data: " + head + R"("choices":[{"index":0,"delta":{"content":"ok"},"logprobs":null,)"
            R"("finish_reason":null}]})" "\n\n"
            "data: " + head + R"("choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]})"
            "\n\n"
            "data: [DONE]\n\n");
}

TEST(OpenAiStream, ErrorEvent) {
  const std::string event = error_event(protocol_error(unavailable("the engine stopped")));
  const json j = event_json(event);
  EXPECT_EQ(j["error"]["message"], "the engine stopped");
  EXPECT_EQ(j["error"]["type"], "service_unavailable_error");
}

TEST(OpenAiStream, NewlinesInTextStayEscaped) {
  const StreamContext s{.meta = kMeta};
  const json j = event_json(completion_chunk(s, "line1\n\nline2\r\n"));
  EXPECT_EQ(j["choices"][0]["text"], "line1\n\nline2\r\n");
}

// ---- StopMatcher -----------------------------------------------------------------------------

// Feeds `pieces` and returns everything released, with whether a stop hit.
std::pair<std::string, bool> run_matcher(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) {
    const StopMatcher::Step step = m.feed(p);
    out += step.text;
    if (step.stopped) return {out, true};
  }
  return {out + m.finish(), false};
}

TEST(StopMatcher, NoStopStringsPassesEverythingThrough) {
  StopMatcher m({});
  const auto step = m.feed("hello");
  EXPECT_EQ(step.text, "hello");
  EXPECT_FALSE(step.stopped);
  EXPECT_EQ(m.finish(), "");
}

TEST(StopMatcher, NoMatchReleasesAllAtFinish) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.feed("abc").text, "abc");
  EXPECT_EQ(m.feed("ST").text, "");  // could be the start of STOP
  EXPECT_EQ(m.feed("x").text, "STx");
  EXPECT_EQ(m.feed("S").text, "");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.finish(), "S");
  EXPECT_EQ(m.matched(), "");
}

TEST(StopMatcher, StopInsideOneIncrement) {
  StopMatcher m({"\n\n"});
  const auto step = m.feed("para one\n\npara two");
  EXPECT_EQ(step.text, "para one");
  EXPECT_TRUE(step.stopped);
  EXPECT_EQ(m.matched(), "\n\n");
  EXPECT_TRUE(m.feed("more").stopped);
  EXPECT_EQ(m.feed("more").text, "");
  EXPECT_EQ(m.finish(), "");
}

TEST(StopMatcher, StopSplitAcrossIncrements) {
  StopMatcher m({"</answer>"});
  EXPECT_EQ(m.feed("42 <").text, "42 ");
  EXPECT_EQ(m.feed("/ans").text, "");
  const auto step = m.feed("wer> trailing");
  EXPECT_TRUE(step.stopped);
  EXPECT_EQ(step.text, "");
  EXPECT_EQ(m.matched(), "</answer>");
}

TEST(StopMatcher, StopSplitOneByteAtATime) {
  const std::string text = "The answer is 42.\nObservation: done";
  StopMatcher m({"Observation:"});
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  const auto [out, stopped] = run_matcher(m, bytes);
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "The answer is 42.\n");
}

TEST(StopMatcher, StopAtTheStart) {
  StopMatcher m({"END"});
  const auto step = m.feed("END of text");
  EXPECT_TRUE(step.stopped);
  EXPECT_EQ(step.text, "");
  StopMatcher split({"END"});
  EXPECT_EQ(split.feed("E").text, "");
  EXPECT_EQ(split.feed("N").text, "");
  EXPECT_TRUE(split.feed("D").stopped);
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  StopMatcher m({"world", "lo w", "xyz"});
  const auto step = m.feed("hello world");
  EXPECT_TRUE(step.stopped);
  EXPECT_EQ(step.text, "hel");
  EXPECT_EQ(m.matched(), "lo w");
}

TEST(StopMatcher, HoldsTheLongestPossiblePrefixOfAnyStop) {
  // "ab" could start "abc"; "b" alone could start "bz": the longer hold covers both.
  StopMatcher m({"abc", "bz"});
  EXPECT_EQ(m.feed("xab").text, "x");
  const auto step = m.feed("z");
  EXPECT_TRUE(step.stopped);
  EXPECT_EQ(step.text, "a");
  EXPECT_EQ(m.matched(), "bz");
}

TEST(StopMatcher, FalseStartIsReleased) {
  StopMatcher m({"###"});
  EXPECT_EQ(m.feed("a##").text, "a");
  EXPECT_EQ(m.feed("b").text, "##b");
  EXPECT_EQ(m.feed("#").text, "");
  const auto step = m.feed("##");
  EXPECT_TRUE(step.stopped);
  EXPECT_EQ(step.text, "");
}

TEST(StopMatcher, OverlappingSelfPrefix) {
  // "aab" inside "aaab": the first 'a' is released only once it cannot start the match.
  StopMatcher m({"aab"});
  EXPECT_EQ(m.feed("a").text, "");
  EXPECT_EQ(m.feed("a").text, "");
  EXPECT_EQ(m.feed("a").text, "a");
  const auto step = m.feed("b");
  EXPECT_TRUE(step.stopped);
  EXPECT_EQ(step.text, "");
}

TEST(StopMatcher, EmptyStopStringsAreIgnored) {
  StopMatcher m({"", "Z"});
  EXPECT_EQ(m.feed("abc").text, "abc");
  EXPECT_TRUE(m.feed("Z").stopped);
}

TEST(StopMatcher, IncompleteUtf8IsHeldUntilComplete) {
  StopMatcher m({});
  const std::string han = "\xe4\xbd\xa0";  // 你
  EXPECT_EQ(m.feed("a\xe4").text, "a");
  EXPECT_EQ(m.feed("\xbd").text, "");
  EXPECT_EQ(m.feed("\xa0" "b").text, han + "b");
  const std::string emoji = "\xf0\x9f\x98\x80";  // 😀
  EXPECT_EQ(m.feed(emoji.substr(0, 3)).text, "");
  EXPECT_EQ(m.feed(emoji.substr(3)).text, emoji);
  // Bytes that are not UTF-8 at all are not held: waiting would not fix them.
  EXPECT_EQ(m.feed("\xff").text, "\xff");
  EXPECT_EQ(m.feed("\x80").text, "\x80");
  // A sequence cut by the end of generation comes out at finish().
  EXPECT_EQ(m.feed("\xc3").text, "");
  EXPECT_EQ(m.finish(), "\xc3");
}

TEST(StopMatcher, MultiByteStopStrings) {
  StopMatcher m({"。\n"});
  EXPECT_EQ(m.feed("好").text, "好");
  EXPECT_EQ(m.feed("\xe3\x80").text, "");
  const auto step = m.feed("\x82\n下");
  EXPECT_TRUE(step.stopped);
  EXPECT_EQ(step.text, "");
}

// Whatever the split, the released text is the same: the text before the first stop.
TEST(StopMatcher, EverySplitGivesTheSameOutput) {
  const std::string text = "one, two; three. four";
  const std::vector<std::string> stops{"three", "; t", "four"};
  for (size_t a = 0; a <= text.size(); ++a) {
    for (size_t b = a; b <= text.size(); ++b) {
      StopMatcher m(stops);
      const auto [out, stopped] = run_matcher(m, {text.substr(0, a), text.substr(a, b - a), text.substr(b)});
      ASSERT_TRUE(stopped) << a << "," << b;
      ASSERT_EQ(out, "one, two") << a << "," << b;
    }
  }
}

// ---- the fuzzing corpus, replayed ----------------------------------------------------------------

// Every seed and every input the fuzzer kept must parse or be refused without
// crashing. Seeds are named <ok|bad>-<completion|chat>-<what>.json: the named
// parser must accept (ok) or refuse (bad) it with a 4xx; inputs the fuzzer
// added (named by hash) only must not crash either parser.
TEST(OpenAiCorpus, EveryFileParsesOrFailsAsItsNameSays) {
  namespace fs = std::filesystem;
  const fs::path corpus = HIQ_OPENAI_CORPUS_DIR;
  ASSERT_TRUE(fs::is_directory(corpus)) << corpus;
  int named = 0, other = 0;
  for (const auto& entry : fs::directory_iterator(corpus)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string name = entry.path().filename().string();
    const auto as_completion = parse_completion_request(text, kLimits);
    const auto as_chat = parse_chat_request(text, kLimits);
    for (const Status& s : {as_completion.status(), as_chat.status()}) {
      if (s.is_ok()) continue;
      const int http = protocol_error(s).http_status;
      EXPECT_TRUE(http == 400 || http == 404) << name << ": " << s.to_string();
    }
    const bool ok = name.starts_with("ok-");
    if (!ok && !name.starts_with("bad-")) {
      ++other;
      continue;
    }
    ++named;
    const bool chat_seed = name.find("-chat-") != std::string::npos;
    const Status& s = chat_seed ? as_chat.status() : as_completion.status();
    EXPECT_EQ(s.is_ok(), ok) << name << ": " << s.to_string();
  }
  EXPECT_GE(named, 20) << "the seeds are missing";
  std::cout << "replayed " << named << " seeds and " << other << " fuzzer inputs\n";
}

}  // namespace
}  // namespace hiq::openai
