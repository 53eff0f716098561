// Tests of tokenizer/chat_template.h: where a model directory's template
// comes from (chat_template.jinja before tokenizer_config.json, named
// templates, --chat-template files), its special tokens, the context that
// transformers gives a template, and the errors for malformed files. The
// byte-for-byte comparison with Python over published templates is
// tests/chat_template_reference.py (ctest: chat_template_reference).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "expect_error.h"
#include "server/model_files.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace hiq {
namespace {

using hiq::testing::expect_error;
namespace fs = std::filesystem;

// A fresh directory under the test temp dir, removed afterwards.
class ChatTemplateDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("hiq_chat_template_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream out(dir_ / name, std::ios::binary);
    out << text;
  }
  std::string dir() const { return dir_.string(); }
  fs::path dir_;
};

const nlohmann::json kHello = nlohmann::json::parse(R"([{"role": "user", "content": "Hi"}])");

TEST_F(ChatTemplateDir, LoadsTheTemplateOfTokenizerConfigWithItsSpecialTokens) {
  write("tokenizer_config.json", R"({
    "bos_token": "<s>",
    "eos_token": {"__type": "AddedToken", "content": "</s>", "lstrip": false},
    "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}{% endfor %}"
  })");
  Result<ChatTemplate> t = ChatTemplate::load(dir());
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->bos_token(), "<s>");
  EXPECT_EQ(t->eos_token(), "</s>");
  EXPECT_EQ(*t->render(kHello, false), "<s>[user]Hi</s>");
}

TEST_F(ChatTemplateDir, PrefersChatTemplateJinjaAsTransformersDoes) {
  write("tokenizer_config.json", R"({"eos_token": "<eos>", "chat_template": "from the config"})");
  write("chat_template.jinja", "from the file {{ eos_token }}\n");
  Result<ChatTemplate> t = ChatTemplate::load(dir());
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(*t->render(kHello, false), "from the file <eos>");  // one trailing newline dropped, as jinja2 does
}

TEST_F(ChatTemplateDir, TakesTheDefaultOfNamedTemplates) {
  write("tokenizer_config.json", R"({"chat_template": [
      {"name": "tool_use", "template": "tools"}, {"name": "default", "template": "plain"}]})");
  Result<ChatTemplate> t = ChatTemplate::load(dir());
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(*t->render(kHello, false), "plain");
}

TEST_F(ChatTemplateDir, NotFoundWithoutATemplate) {
  expect_error(ChatTemplate::load(dir()), StatusCode::kNotFound, {"no chat template"});
  write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  expect_error(ChatTemplate::load(dir()), StatusCode::kNotFound, {"tokenizer_config.json", "no field 'chat_template'"});
  write("tokenizer_config.json", R"({"chat_template": null})");
  expect_error(ChatTemplate::load(dir()), StatusCode::kNotFound, {"chat_template"});
}

TEST_F(ChatTemplateDir, MalformedFilesAreInvalidArgumentsNamingFileAndField) {
  write("tokenizer_config.json", "{ not json");
  expect_error(ChatTemplate::load(dir()), StatusCode::kInvalidArgument, {"tokenizer_config.json"});
  write("tokenizer_config.json", R"({"chat_template": 5})");
  expect_error(ChatTemplate::load(dir()), StatusCode::kInvalidArgument,
               {"tokenizer_config.json", "field 'chat_template' must be a string"});
  write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "x"}]})");
  expect_error(ChatTemplate::load(dir()), StatusCode::kInvalidArgument, {"no \"default\" template", "'tool_use'"});
  write("tokenizer_config.json", R"({"chat_template": [{"name": "default"}]})");
  expect_error(ChatTemplate::load(dir()), StatusCode::kInvalidArgument, {"field 'chat_template[0]'"});
  write("tokenizer_config.json", R"({"chat_template": "x", "bos_token": 7})");
  expect_error(ChatTemplate::load(dir()), StatusCode::kInvalidArgument, {"field 'bos_token'"});
  write("tokenizer_config.json", R"({"chat_template": "a\n{% include 'b' %}"})");
  expect_error(ChatTemplate::load(dir()), StatusCode::kInvalidArgument,
               {"tokenizer_config.json: field 'chat_template'", "line 2: the 'include' tag is not supported"});
  write("tokenizer_config.json", R"({"chat_template": "x"})");
  write("chat_template.jinja", "{% if %}");
  expect_error(ChatTemplate::load(dir()), StatusCode::kInvalidArgument, {"chat_template.jinja", "line 1"});
}

TEST_F(ChatTemplateDir, LoadFileReadsJinjaTextOrJsonAndTokensFromTheModelDir) {
  write("tokenizer_config.json", R"({"bos_token": "<B>", "chat_template": "unused"})");
  write("custom.jinja", "{{ bos_token }}custom {{ messages | length }}");
  write("custom.json", R"({"chat_template": "{{ bos_token }}json"})");
  Result<ChatTemplate> text = ChatTemplate::load_file((dir_ / "custom.jinja").string(), dir());
  ASSERT_TRUE(text.is_ok()) << text.status().to_string();
  EXPECT_EQ(*text->render(kHello, false), "<B>custom 1");
  Result<ChatTemplate> json = ChatTemplate::load_file((dir_ / "custom.json").string(), dir());
  ASSERT_TRUE(json.is_ok()) << json.status().to_string();
  EXPECT_EQ(*json->render(kHello, false), "<B>json");
  // Without a model directory the tokens are undefined and print as nothing.
  Result<ChatTemplate> bare = ChatTemplate::load_file((dir_ / "custom.jinja").string(), "");
  ASSERT_TRUE(bare.is_ok());
  EXPECT_EQ(*bare->render(kHello, false), "custom 1");
  expect_error(ChatTemplate::load_file((dir_ / "missing.jinja").string(), dir()), StatusCode::kNotFound,
               {"missing.jinja"});
}

TEST(ChatTemplate, ContextIsTheOneTransformersGives) {
  Result<ChatTemplate> t = ChatTemplate::from_source(
      "{{ tools is defined }}|{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}|"
      "{{ bos_token is defined }}|{{ eos_token }}|{{ enable_thinking is defined }}",
      "", "<|im_end|>");
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(*t->render(kHello, true), "True|True|True|True|False|<|im_end|>|False");
  EXPECT_EQ(*t->render(kHello, false, {{"enable_thinking", false}}), "True|True|True|False|False|<|im_end|>|True");
}

TEST(ChatTemplate, ExtraVariablesReachTheTemplateButCannotReplaceMessages) {
  Result<ChatTemplate> t = ChatTemplate::from_source(
      "{% if tools %}{{ tools | map(attribute='name') | join(',') }}{% endif %}"
      "{% if enable_thinking is false %}<nothink>{% endif %}",
      "", "");
  ASSERT_TRUE(t.is_ok());
  const nlohmann::json extra = {{"tools", {{{"name", "a"}}, {{"name", "b"}}}}, {"enable_thinking", false}};
  EXPECT_EQ(*t->render(kHello, true, extra), "a,b<nothink>");
  expect_error(t->render(kHello, true, {{"messages", nlohmann::json::array()}}), StatusCode::kInvalidArgument,
               {"may not set 'messages'"});
  expect_error(t->render(nlohmann::json::object(), true), StatusCode::kInvalidArgument, {"messages must be"});
}

TEST(ChatTemplate, RaiseExceptionReachesTheCallerAsItsMessage) {
  Result<ChatTemplate> t = ChatTemplate::from_source(
      "{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}"
      "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",
      "", "");
  ASSERT_TRUE(t.is_ok());
  Result<std::string> r = t->render(nlohmann::json::parse(R"([{"role": "tool", "content": "x"}])"), true);
  expect_error(r, StatusCode::kInvalidArgument, {});
  EXPECT_EQ(r.status().message(), "Only user and assistant roles are supported!");
}

TEST(ChatTemplate, OrderedJsonKeepsToolSchemaKeyOrder) {
  Result<ChatTemplate> t = ChatTemplate::from_source("{% for tool in tools %}{{ tool | tojson }}{% endfor %}", "", "");
  ASSERT_TRUE(t.is_ok());
  const auto extra = nlohmann::ordered_json::parse(R"({"tools": [{"type": "function", "function": {"name": "f"}}]})");
  EXPECT_EQ(*t->render(nlohmann::ordered_json::parse(R"([{"role": "user", "content": "x"}])"), true, extra),
            R"({"type": "function", "function": {"name": "f"}})");
}

TEST(ChatTemplate, ChatmlMatchesApplyChatml) {
  const ChatTemplate chatml = ChatTemplate::chatml();
  const nlohmann::json messages = nlohmann::json::parse(
      R"([{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Und auf Deutsch? 🙂"}])");
  const std::vector<ChatMessage> plain = {{ChatRole::kSystem, "You are helpful."},
                                          {ChatRole::kUser, "Und auf Deutsch? 🙂"}};
  for (bool prompt : {false, true}) EXPECT_EQ(*chatml.render(messages, prompt), apply_chatml(plain, prompt));
  EXPECT_EQ(*chatml.render(nlohmann::json::array(), true), "<|im_start|>assistant\n");
}

// What a text prompt starts with when tokenizer.json has no TemplateProcessing:
// tokenizer_config.json's add_bos_token and bos_token (the slow tokenizers' rule).
TEST_F(ChatTemplateDir, APromptPrefixFollowsAddBosTokenAndRefusesANonBoolean) {
  auto tokenizer = Tokenizer::load(std::string(HIQ_TEST_MODELS_DIR) + "/tiny-qwen3");
  ASSERT_TRUE(tokenizer.is_ok()) << tokenizer.status().to_string();
  write("tokenizer_config.json", R"({"add_bos_token": true, "bos_token": "a"})");
  EXPECT_EQ(*read_prompt_prefix(dir(), *tokenizer), std::vector<int32_t>{'a'});
  for (const char* absent : {R"({"add_bos_token": false, "bos_token": "a"})", R"({"add_bos_token": null, "bos_token": "a"})",
                             R"({"bos_token": "a"})"}) {
    write("tokenizer_config.json", absent);
    EXPECT_TRUE(read_prompt_prefix(dir(), *tokenizer)->empty()) << absent;
  }
  for (const char* bad : {R"({"add_bos_token": "true", "bos_token": "a"})", R"({"add_bos_token": 1})"}) {
    write("tokenizer_config.json", bad);
    expect_error(read_prompt_prefix(dir(), *tokenizer), StatusCode::kInvalidArgument,
                 {"tokenizer_config.json", "add_bos_token", "must be true or false"});
  }
}

}  // namespace
}  // namespace hiq
