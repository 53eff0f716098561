// The tokenizer (src/tokenizer) against Hugging Face `tokenizers` 0.23.2:
// three byte-level BPE tokenizers and the ids HF gives for 31 texts
// (tests/data/tokenizers/, made by scripts/make-tokenizer-data): Qwen2's
// split regex with an NFC normalizer, Llama 3's regex, and the 256 byte
// tokens of the tiny test models. Every case must give exactly HF's ids and
// decode to HF's text, whole and streamed one id at a time. Then the edges:
// round trips of multilingual text, invalid UTF-8 refused with its offset,
// special tokens as text, ChatML, tokenizer.json files we must refuse (each
// error names the field), and long pathological inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "expect_error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/regex_split.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_classes.h"
#include "tokenizer/unicode_nfc.h"
#include "tokenizer/utf8.h"

namespace hiq {
namespace {

using nlohmann::json;
using testing::expect_error;

const std::string kTokenizersDir = HIQ_TEST_TOKENIZERS_DIR;
const std::string kModelsDir = HIQ_TEST_MODELS_DIR;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

const Tokenizer& tokenizer(const std::string& name) {
  static std::map<std::string, Tokenizer> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end()) {
    auto tok = Tokenizer::load(kTokenizersDir + "/" + name + "/tokenizer.json");
    HIQ_CHECK_MSG(tok.is_ok(), tok.status().to_string().c_str());
    it = loaded.emplace(name, std::move(*tok)).first;
  }
  return it->second;
}

std::vector<int32_t> encode_ok(const Tokenizer& tok, std::string_view text, bool parse_special = true) {
  auto ids = tok.encode(text, parse_special);
  EXPECT_TRUE(ids.is_ok()) << ids.status().to_string();
  return ids.is_ok() ? *ids : std::vector<int32_t>{};
}

bool is_valid_utf8(std::string_view s) { return validate_utf8(s).is_ok(); }

// Feeds `ids` one at a time; every piece must be well-formed on its own.
std::string stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special = false) {
  StreamDecoder decoder(tok, skip_special);
  std::string text;
  for (int32_t id : ids) {
    const std::string piece = decoder.feed(id);
    EXPECT_TRUE(is_valid_utf8(piece)) << "a fed piece is not UTF-8 at id " << id;
    EXPECT_LE(decoder.pending_bytes(), 3u);
    text += piece;
  }
  const std::string rest = decoder.flush();
  EXPECT_TRUE(is_valid_utf8(rest));
  return text + rest;
}

// ---- against Hugging Face ---------------------------------------------------

class ReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceTest, EveryCaseGivesHuggingFacesIdsAndText) {
  const Tokenizer& tok = tokenizer(GetParam());
  const json expected = json::parse(read_file(kTokenizersDir + "/" + GetParam() + "/expected.json"));
  ASSERT_EQ(expected["cases"].size(), 31u);
  for (const json& c : expected["cases"]) {
    const std::string text = c["text"];
    SCOPED_TRACE("text: " + text.substr(0, 60));
    const std::vector<int32_t> ids = encode_ok(tok, text);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(tok.decode(ids), c["decoded"].get<std::string>());
    EXPECT_EQ(stream(tok, ids), c["decoded"].get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, ReferenceTest, ::testing::Values("qwen2-style", "llama3-style", "bytes-only"));

TEST(Tokenizer, QwenStyleVocabularyAndSpecialTokens) {
  const Tokenizer& tok = tokenizer("qwen2-style");
  EXPECT_EQ(tok.vocab_size(), 903u);
  EXPECT_TRUE(tok.normalizes_nfc());
  EXPECT_EQ(tok.token_id("<|endoftext|>"), 0);
  EXPECT_EQ(tok.token_id("<|im_start|>"), 1);
  EXPECT_EQ(tok.token_id("<|im_end|>"), 2);
  EXPECT_EQ(tok.token_id("Ġ"), 223);  // a space, in the byte-level alphabet
  EXPECT_EQ(tok.token_id("no such token"), std::nullopt);
  EXPECT_EQ(tok.id_to_token(1), "<|im_start|>");
  EXPECT_EQ(tok.id_to_token(223), "Ġ");
  EXPECT_EQ(tok.id_to_token(903), std::nullopt);
  EXPECT_TRUE(tok.is_special(1));
  EXPECT_FALSE(tok.is_special(223));
  EXPECT_FALSE(tok.is_special(-1));
  EXPECT_EQ(tok.token_bytes(223), " ");
  ASSERT_EQ(tok.added_tokens().size(), 3u);
  EXPECT_FALSE(tok.added_tokens()[0].normalized);
}

TEST(Tokenizer, TinyModelDirectoriesHaveTheByteVocabulary) {
  for (const char* model : {"tiny-qwen3", "tiny-llama", "tiny-qwen2"}) {
    SCOPED_TRACE(model);
    auto tok = Tokenizer::load(kModelsDir + "/" + model);  // a directory: its tokenizer.json
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    EXPECT_EQ(tok->vocab_size(), 256u);
    EXPECT_EQ(encode_ok(*tok, "hi é"), (std::vector<int32_t>{'h', 'i', ' ', 0xC3, 0xA9}));
  }
}

// ---- round trips and streaming ---------------------------------------------

const std::vector<std::string>& multilingual_texts() {
  static const std::vector<std::string> texts = {
      "The KV cache of a shared prefix is reused across requests.",
      "Ça coûte 12,50 € — très cher ! Größe: 3 m²; ½ ÷ ¾",
      "大型语言模型在多个请求之间共享键值缓存，节省了大量计算。",
      "東京都の人口は約1400万人です。ｶﾀｶﾅ（半角）も。",
      "서울특별시는 대한민국의 수도입니다.",
      "Привет, мир! Ёлка и ЁЖ.",
      "שלום עולם — مرحبا بالعالم — नमस्ते दुनिया — สวัสดีชาวโลก",
      "Ελληνικά: ΑΒΓ αβγ ς — Ἀθῆναι",
      "Emoji: 👩🏽‍🚀 🏳️‍🌈 🇩🇪 ❤️ 1️⃣ and math 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛",
      "Decomposed: e\u0301 a\u0308 n\u0303 \u1100\u1161\u11A8 and Ω\u212b\u2126",
      "Controls: \x01\x02\x7f tab\there, CR\r\nLF\n\u2028\u2029\u0085",
      std::string("NUL \0 inside", 12),
      "Spaces: \u00a0non-breaking\u3000ideographic\u2003em\u200bzero-width",
      "Code: for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }  // 100%",
      "   ",
      "'s 're 'LL 'Ve l'été rock'n'roll",
  };
  return texts;
}

TEST(Tokenizer, DecodeOfEncodeIsTheNormalizedText) {
  for (const char* name : {"qwen2-style", "llama3-style", "bytes-only"}) {
    const Tokenizer& tok = tokenizer(name);
    for (const std::string& text : multilingual_texts()) {
      SCOPED_TRACE(std::string(name) + ": " + text);
      const std::vector<int32_t> ids = encode_ok(tok, text);
      const std::string expected = tok.normalizes_nfc() ? *to_nfc(text) : text;
      EXPECT_EQ(tok.decode(ids), expected);
      EXPECT_EQ(stream(tok, ids), expected);
      for (int32_t id : ids) EXPECT_TRUE(id >= 0 && static_cast<size_t>(id) < tok.vocab_size());
    }
  }
}

TEST(Tokenizer, NfcComposesAndLeavesComposedTextAlone) {
  EXPECT_EQ(*to_nfc("e\u0301"), "\u00e9");
  EXPECT_EQ(*to_nfc("\u212b"), "\u00c5");                   // angstrom sign → Å
  EXPECT_EQ(*to_nfc("\u1100\u1161\u11a8"), "\uac01");       // conjoining jamo → 각
  EXPECT_EQ(*to_nfc("plain ASCII, Latin-1 é"), "plain ASCII, Latin-1 é");
  EXPECT_EQ(*to_nfc(std::string("a\0e\u0301", 5)), std::string("a\0\u00e9", 4));  // NUL is a character
  // The qwen2-style tokenizer normalizes: both spellings give the same ids.
  const Tokenizer& qwen = tokenizer("qwen2-style");
  EXPECT_EQ(encode_ok(qwen, "caf\u00e9"), encode_ok(qwen, "cafe\u0301"));
  const Tokenizer& llama = tokenizer("llama3-style");
  EXPECT_NE(encode_ok(llama, "caf\u00e9"), encode_ok(llama, "cafe\u0301"));
}

TEST(StreamDecoder, HoldsBackAnOpenCharacterAndNeverEmitsBrokenUtf8) {
  const Tokenizer& tok = tokenizer("bytes-only");  // id b is byte b
  StreamDecoder decoder(tok);
  // 🚀 is F0 9F 9A 80.
  EXPECT_EQ(decoder.feed('a'), "a");
  EXPECT_EQ(decoder.feed(0xF0), "");
  EXPECT_EQ(decoder.feed(0x9F), "");
  EXPECT_EQ(decoder.feed(0x9A), "");
  EXPECT_EQ(decoder.pending_bytes(), 3u);
  EXPECT_EQ(decoder.feed(0x80), "🚀");
  // An ill-formed sequence is replaced as soon as it is certain.
  EXPECT_EQ(decoder.feed(0xE2), "");
  EXPECT_EQ(decoder.feed('('), "\uFFFD(");
  EXPECT_EQ(decoder.feed(0x80), "\uFFFD");
  // An unfinished character at the end becomes one U+FFFD.
  EXPECT_EQ(decoder.feed(0xE2), "");
  EXPECT_EQ(decoder.feed(0x82), "");
  EXPECT_EQ(decoder.flush(), "\uFFFD");
  EXPECT_EQ(decoder.flush(), "");
  // Ids without a token add nothing.
  EXPECT_EQ(decoder.feed(-5), "");
  EXPECT_EQ(decoder.feed(100000), "");
}

TEST(StreamDecoder, RandomIdsStreamAsTheRepairedDecode) {
  // A model may emit any id: whatever the order, streaming gives the
  // repaired text of the whole decode (HF's lossy decode) and nothing broken.
  std::mt19937 rng(1234);
  for (const char* name : {"bytes-only", "qwen2-style"}) {
    const Tokenizer& tok = tokenizer(name);
    std::uniform_int_distribution<int32_t> pick(-2, static_cast<int32_t>(tok.vocab_size()) + 2);
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<int32_t> ids(static_cast<size_t>(1 + trial % 40));
      for (int32_t& id : ids) id = pick(rng);
      for (bool skip : {false, true}) {
        const std::string streamed = stream(tok, ids, skip);
        EXPECT_EQ(streamed, to_valid_utf8(tok.decode(ids, skip)));
      }
    }
  }
}

TEST(StreamDecoder, SkipsSpecialTokensWhenAsked) {
  const Tokenizer& tok = tokenizer("qwen2-style");
  const std::vector<int32_t> ids = encode_ok(tok, "<|im_start|>user\nhi<|im_end|>");
  EXPECT_EQ(stream(tok, ids, /*skip_special=*/true), "user\nhi");
  EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), "user\nhi");
  EXPECT_EQ(stream(tok, ids), "<|im_start|>user\nhi<|im_end|>");
}

// ---- input edges ------------------------------------------------------------

TEST(Tokenizer, EmptyTextGivesNoIds) {
  for (const char* name : {"qwen2-style", "llama3-style", "bytes-only"}) {
    EXPECT_TRUE(encode_ok(tokenizer(name), "").empty());
    EXPECT_EQ(tokenizer(name).decode({}), "");
  }
}

TEST(Tokenizer, InvalidUtf8IsRefusedWithItsOffset) {
  const Tokenizer& tok = tokenizer("qwen2-style");
  struct Case {
    std::string text;
    std::string offset;
    std::string reason;
  };
  const Case cases[] = {
      {"ab\x80" "c", "offset 2 (0x80)", "continuation byte with no lead byte"},
      {"abc\xE2\x82", "offset 3 (0xe2)", "cut short by the end of the text"},
      {"\xE2\x82" "abc", "offset 0 (0xe2)", "truncated sequence"},
      {"x\xC0\xAF", "offset 1 (0xc0)", "overlong"},
      {"xy\xE0\x80\xAF", "offset 2 (0xe0)", "overlong"},
      {"\xF0\x80\x80\xAF", "offset 0 (0xf0)", "overlong"},
      {"ok \xED\xA0\x80", "offset 3 (0xed)", "surrogate"},
      {"\xED\xBF\xBF", "offset 0 (0xed)", "surrogate"},
      {"\xF4\x90\x80\x80", "offset 0 (0xf4)", "above U+10FFFF"},
      {"\xF5\x80\x80\x80", "offset 0 (0xf5)", "above U+10FFFF"},
      {"valid é then \xFF", "offset 14 (0xff)", "never occurs"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.offset);
    for (bool parse_special : {true, false})
      expect_error(tok.encode(c.text, parse_special), StatusCode::kInvalidArgument,
                   {"not valid UTF-8", c.offset, c.reason});
  }
  // The largest code point and the characters around the surrogates are fine.
  EXPECT_TRUE(tok.encode("\xF4\x8F\xBF\xBF \xED\x9F\xBF \xEE\x80\x80").is_ok());
}

TEST(Tokenizer, SpecialTokensAreTextWithoutParseSpecial) {
  const Tokenizer& tok = tokenizer("qwen2-style");
  const std::string text = "<|im_start|>user<|im_end|>";
  const std::vector<int32_t> special = encode_ok(tok, text, true);
  ASSERT_FALSE(special.empty());
  EXPECT_EQ(special.front(), 1);
  EXPECT_EQ(special.back(), 2);
  const std::vector<int32_t> plain = encode_ok(tok, text, false);
  for (int32_t id : plain) EXPECT_FALSE(tok.is_special(id)) << id;
  EXPECT_GT(plain.size(), special.size());
  EXPECT_EQ(tok.decode(plain), text);
  EXPECT_EQ(encode_ok(tokenizer("bytes-only"), text, true).size(), text.size());  // no added tokens there
}

TEST(Tokenizer, DecodeSkipsIdsWithoutATokenAndSpecialTokensWhenAsked) {
  const Tokenizer& tok = tokenizer("qwen2-style");
  const std::vector<int32_t> ids = {1, -1, 223, 903, 1 << 30, 2};
  EXPECT_EQ(tok.decode(ids), "<|im_start|> <|im_end|>");
  EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), " ");
}

TEST(Tokenizer, LongAndRepetitiveTextEncodesInLinearTime) {
  // Nothing here is timed against a limit; a quadratic merge or split would
  // take minutes on these and trip the test timeout.
  std::string mixed;
  while (mixed.size() < 100'000)
    for (const std::string& text : multilingual_texts()) mixed += text + "\n";
  const std::vector<std::string> texts = {
      mixed,
      std::string(100'000, 'x'),
      std::string(100'000, ' '),
      std::string(100'000, '\n'),
      std::string(50'000, ' ') + "end",
      [] {
        std::string s;
        while (s.size() < 100'000) s += "🚀";
        return s;
      }(),
      [] {
        std::string s;
        while (s.size() < 100'000) s += "<|im_start|><|im_";
        return s;
      }(),
  };
  for (const char* name : {"qwen2-style", "llama3-style"}) {
    const Tokenizer& tok = tokenizer(name);
    for (const std::string& text : texts) {
      const auto start = std::chrono::steady_clock::now();
      const std::vector<int32_t> ids = encode_ok(tok, text);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      std::printf("[ tokenizer ] %s: %zu bytes -> %zu ids in %.1f ms\n", name, text.size(), ids.size(), ms);
      EXPECT_EQ(tok.decode(ids), tok.normalizes_nfc() ? *to_nfc(text) : text);
    }
  }
}

// ---- ChatML -----------------------------------------------------------------

TEST(ChatTemplate, ChatmlIsExact) {
  const std::vector<ChatMessage> messages = {
      {ChatRole::kSystem, "You are helpful."},
      {ChatRole::kUser, "What is 2+2?"},
      {ChatRole::kAssistant, "4"},
      {ChatRole::kUser, "Und auf Deutsch? 🙂"},
  };
  const std::string conversation =
      "<|im_start|>system\nYou are helpful.<|im_end|>\n"
      "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
      "<|im_start|>assistant\n4<|im_end|>\n"
      "<|im_start|>user\nUnd auf Deutsch? 🙂<|im_end|>\n";
  EXPECT_EQ(apply_chatml(messages, false), conversation);
  EXPECT_EQ(apply_chatml(messages, true), conversation + "<|im_start|>assistant\n");
  EXPECT_EQ(apply_chatml({}, true), "<|im_start|>assistant\n");

  // Rendered and tokenized, each <|im_start|> and <|im_end|> is one id.
  const Tokenizer& tok = tokenizer("qwen2-style");
  const std::vector<int32_t> ids = encode_ok(tok, apply_chatml(messages, true));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 5);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 4);
  EXPECT_EQ(ids.back(), *tok.token_id("Ċ"));  // the newline after "assistant"
}

TEST(ChatTemplate, RolesAreSystemUserAndAssistantOnly) {
  EXPECT_EQ(*parse_chat_role("system"), ChatRole::kSystem);
  EXPECT_EQ(*parse_chat_role("user"), ChatRole::kUser);
  EXPECT_EQ(*parse_chat_role("assistant"), ChatRole::kAssistant);
  for (const char* role : {"tool", "User", "", "developer"})
    expect_error(parse_chat_role(role), StatusCode::kInvalidArgument,
                 {"role '" + std::string(role) + "'", "system, user and assistant"});
}

// ---- tokenizer.json files we refuse -----------------------------------------

// The bytes-only tokenizer.json, changed by `edit`.
Result<Tokenizer> load_edited(const std::function<void(json&)>& edit) {
  json file = json::parse(read_file(kTokenizersDir + "/bytes-only/tokenizer.json"));
  edit(file);
  return Tokenizer::from_json(file.dump(), "edited.json");
}

// A Split step with `pattern` before the ByteLevel step.
void use_split(json& file, const json& split) {
  file["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({split, json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
}

json split_step(const std::string& regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
}

TEST(TokenizerJson, TheUneditedFileLoads) { EXPECT_TRUE(load_edited([](json&) {}).is_ok()); }

TEST(TokenizerJson, MalformedFilesAreRefusedNamingTheField) {
  const auto refused = [](const std::function<void(json&)>& edit, std::initializer_list<std::string_view> needles) {
    expect_error(load_edited(edit), StatusCode::kInvalidArgument, needles);
    EXPECT_TRUE(load_edited(edit).status().message().starts_with("edited.json: "));
  };
  refused([](json& f) { f.erase("model"); }, {"field 'model' is missing"});
  refused([](json& f) { f["model"] = 3; }, {"field 'model' must be an object"});
  refused([](json& f) { f["model"]["type"] = "WordPiece"; }, {"field 'model.type'", "'WordPiece'", "BPE"});
  refused([](json& f) { f["model"].erase("type"); }, {"field 'model.type' is missing"});
  refused([](json& f) { f["model"].erase("vocab"); }, {"field 'model.vocab' is missing"});
  refused([](json& f) { f["model"]["vocab"]["!"] = -1; }, {"field 'model.vocab['!']'", "[0, "});
  refused([](json& f) { f["model"]["vocab"]["!"] = 1; }, {"field 'model.vocab'", "gives id 1 to both"});
  refused([](json& f) { f["model"].erase("merges"); }, {"field 'model.merges' is missing"});
  refused([](json& f) { f["model"]["merges"] = {"a"}; }, {"field 'model.merges[0]'", "one space"});
  refused([](json& f) { f["model"]["merges"] = {"a  b"}; }, {"field 'model.merges[0]'", "one space"});
  refused([](json& f) { f["model"]["merges"] = json::array({7}); }, {"field 'model.merges[0]'", "[a, b] pair"});
  refused([](json& f) { f["model"]["merges"] = json::array({json::array({"a"})}); },
          {"field 'model.merges[0]'", "[a, b] pair"});
  refused([](json& f) { f["model"]["merges"] = "a b"; }, {"field 'model.merges' must be an array"});
  refused([](json& f) { f["model"]["merges"] = {"a b"}; }, {"field 'model.merges[0]'", "'ab' is not in the vocabulary"});
  refused([](json& f) { f["model"]["merges"] = json::array({json::array({"a", "zz"})}); },
          {"field 'model.merges[0]'", "'zz' is not in"});
  refused([](json& f) { f["model"]["byte_fallback"] = true; }, {"field 'model.byte_fallback'"});
  refused([](json& f) { f["model"]["dropout"] = 0.1; }, {"field 'model.dropout'"});
  refused([](json& f) { f["model"]["continuing_subword_prefix"] = "##"; },
          {"field 'model.continuing_subword_prefix'", "is \"##\"", "null or \"\""});
  refused([](json& f) { f["model"]["end_of_word_suffix"] = "</w>"; },
          {"field 'model.end_of_word_suffix'", "is \"</w>\""});
  refused([](json& f) { f["model"]["end_of_word_suffix"] = 1; }, {"field 'model.end_of_word_suffix'", "is 1"});
  refused([](json& f) { f["model"]["unk_token"] = "<unk>"; }, {"field 'model.unk_token'", "not in the vocabulary"});
  refused([](json& f) { f["version"] = "2.0"; }, {"field 'version'"});
  refused([](json& f) { f["normalizer"] = {{"type", "NFKC"}}; }, {"field 'normalizer.type'", "'NFKC'"});
  refused([](json& f) {
            f["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({json{{"type", "Lowercase"}}})}};
          },
          {"field 'normalizer.normalizers[0].type'", "'Lowercase'"});
  refused([](json& f) { f["pre_tokenizer"] = nullptr; }, {"field 'pre_tokenizer' is null"});
  refused([](json& f) { f["pre_tokenizer"] = {{"type", "Whitespace"}}; }, {"field 'pre_tokenizer.type'", "'Whitespace'"});
  refused([](json& f) { f["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({split_step("a")})}}; },
          {"field 'pre_tokenizer'", "no ByteLevel step"});
  refused([](json& f) { f["pre_tokenizer"].erase("add_prefix_space"); }, {"field 'pre_tokenizer.add_prefix_space'"});
  refused([](json& f) {
            json split = split_step("\\s+");
            split["behavior"] = "Removed";
            use_split(f, split);
          },
          {"field 'pre_tokenizer.pretokenizers[0].behavior'", "Isolated"});
  refused([](json& f) {
            json split = split_step("\\s+");
            split["invert"] = true;
            use_split(f, split);
          },
          {"field 'pre_tokenizer.pretokenizers[0].invert'"});
  refused([](json& f) { use_split(f, split_step("(unclosed")); },
          {"field 'pre_tokenizer.pretokenizers[0].pattern.Regex'", "PCRE2 cannot compile"});
  refused([](json& f) { use_split(f, split_step("\\w+")); }, {"pattern.Regex' uses \\w", "Oniguruma"});
  refused([](json& f) { use_split(f, split_step("[a-z]+$")); }, {"uses the anchor $"});
  refused([](json& f) { use_split(f, split_step("(?m:a)")); }, {"uses the inline flag m"});
  refused([](json& f) { use_split(f, split_step("[a-z&&[^aeiou]]")); }, {"class intersection"});
  refused([](json& f) { use_split(f, split_step("[a[bc]]")); }, {"nested character class"});
  refused([](json& f) { use_split(f, split_step("[\\Sa]")); }, {"uses \\S inside a character class"});
  refused([](json& f) { use_split(f, split_step("[\\P{L}a]")); }, {"negated property (\\P{L})", "character class"});
  refused([](json& f) {
            f["pre_tokenizer"] = {
                {"type", "Sequence"},
                {"pretokenizers",
                 json::array({json{{"type", "ByteLevel"}, {"add_prefix_space", false}}, split_step("a")})}};
          },
          {"field 'pre_tokenizer.pretokenizers[1]'", "ByteLevel must be the last"});
  refused([](json& f) { f["decoder"] = nullptr; }, {"field 'decoder'", "ByteLevel decoder"});
  refused([](json& f) { f["decoder"] = {{"type", "WordPiece"}}; }, {"field 'decoder.type'", "'WordPiece'"});
  refused([](json& f) { f["post_processor"] = {{"type", "BertProcessing"}}; }, {"field 'post_processor.type'"});
  const json added = {{"id", 256}, {"content", "<|x|>"}, {"special", true}, {"normalized", false}};
  refused([&](json& f) { f["added_tokens"] = json::array({added, added}); },
          {"field 'added_tokens[1].content'", "added twice"});
  refused([&](json& f) {
            json a = added;
            a["id"] = 300;
            f["added_tokens"] = json::array({a});
          },
          {"field 'added_tokens[0].id'", "is 300", "gives it 256"});
  refused([&](json& f) {
            json a = added;
            a["lstrip"] = true;
            f["added_tokens"] = json::array({a});
          },
          {"field 'added_tokens[0].lstrip'", "only false"});
  refused([&](json& f) {
            json a = added;
            a["content"] = "";
            f["added_tokens"] = json::array({a});
          },
          {"field 'added_tokens[0].content' is empty"});
}

// Values that change nothing are accepted: Qwen2.5 and Qwen3 write "" for
// both affixes, Llama 3 sets flags on ByteLevel steps that only move offsets.
TEST(TokenizerJson, FieldsThatChangeNothingAreAccepted) {
  const auto accepted = [](const std::function<void(json&)>& edit) {
    auto tok = load_edited(edit);
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    EXPECT_EQ(*tok->encode("ab c"), (std::vector<int32_t>{'a', 'b', ' ', 'c'}));
  };
  accepted([](json& f) {
    f["model"]["continuing_subword_prefix"] = "";
    f["model"]["end_of_word_suffix"] = "";
  });
  accepted([](json& f) { f["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array()}}; });
  accepted([](json& f) {
    f["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
    f["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}};
  });
  accepted([](json& f) {
    f["truncation"] = nullptr;
    f["padding"] = nullptr;
  });
}

TEST(TokenizerJson, UnreadableInputIsRefused) {
  expect_error(Tokenizer::from_json("{\"model\": ", "cut.json"), StatusCode::kDataLoss, {"cut.json", "not valid JSON"});
  expect_error(Tokenizer::from_json("[1, 2]", "array.json"), StatusCode::kInvalidArgument,
               {"array.json", "expected a JSON object"});
  expect_error(Tokenizer::from_json(std::string(100, '[') + std::string(100, ']'), "deep.json"),
               StatusCode::kDataLoss, {"deep.json", "nests more than"});
  expect_error(Tokenizer::load(kTokenizersDir + "/no-such/tokenizer.json"), StatusCode::kNotFound,
               {"no-such/tokenizer.json", "no such file"});
}

// ---- options that the reference tokenizers do not exercise ------------------

TEST(TokenizerJson, IgnoreMergesTakesAVocabularyWordWhole) {
  // "xyz" is in the vocabulary but no merge builds it.
  const auto with_xyz = [](bool ignore_merges) {
    return load_edited([&](json& f) {
      f["model"]["vocab"]["xyz"] = 256;
      f["model"]["ignore_merges"] = ignore_merges;
    });
  };
  auto merged = with_xyz(false);
  auto whole = with_xyz(true);
  ASSERT_TRUE(merged.is_ok() && whole.is_ok()) << merged.status().to_string() << whole.status().to_string();
  EXPECT_EQ(encode_ok(*merged, "xyz"), (std::vector<int32_t>{'x', 'y', 'z'}));
  EXPECT_EQ(encode_ok(*whole, "xyz"), (std::vector<int32_t>{256}));
  EXPECT_EQ(whole->decode(std::vector<int32_t>{256}), "xyz");
}

TEST(TokenizerJson, MergesAsStringsOrPairsAndInRankOrder) {
  // "a b" and ["b", "c"] both load; with ranks ab < bc, "abc" → ab c.
  const auto build = [](json merges) {
    return load_edited([&](json& f) {
      f["model"]["vocab"]["ab"] = 256;
      f["model"]["vocab"]["bc"] = 257;
      f["model"]["merges"] = merges;
    });
  };
  auto ab_first = build(json::array({"#version: 0.2", "a b", json::array({"b", "c"})}));
  auto bc_first = build(json::array({json::array({"b", "c"}), "a b"}));
  ASSERT_TRUE(ab_first.is_ok() && bc_first.is_ok()) << ab_first.status().to_string();
  EXPECT_EQ(encode_ok(*ab_first, "abc"), (std::vector<int32_t>{256, 'c'}));
  EXPECT_EQ(encode_ok(*bc_first, "abc"), (std::vector<int32_t>{'a', 257}));
}

TEST(TokenizerJson, AddedTokensThatAreNotSpecialMatchAlways) {
  auto tok = load_edited([](json& f) {
    f["added_tokens"] = json::array({json{{"id", 256}, {"content", "<tool>"}, {"special", false}, {"normalized", false}},
                                     json{{"id", 257}, {"content", "<tool_call>"}, {"special", true}, {"normalized", false}}});
  });
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ(tok->vocab_size(), 258u);
  EXPECT_EQ(encode_ok(*tok, "a<tool>b"), (std::vector<int32_t>{'a', 256, 'b'}));
  EXPECT_EQ(encode_ok(*tok, "a<tool>b", false), (std::vector<int32_t>{'a', 256, 'b'}));
  // Longest match first: "<tool_call>" wins over its prefix "<tool".
  EXPECT_EQ(encode_ok(*tok, "<tool_call>"), (std::vector<int32_t>{257}));
  // Passed over as text without parse_special, and not searched again inside.
  EXPECT_EQ(encode_ok(*tok, "<tool_call>", false).size(), std::string("<tool_call>").size());
  EXPECT_FALSE(tok->is_special(256));
  EXPECT_TRUE(tok->is_special(257));
}

TEST(TokenizerJson, AddedTokensWithNormalizedTrueMatchTheNormalizedText) {
  // With NFC, "cafe\u0301" normalizes to "café", which the token matches.
  auto tok = load_edited([](json& f) {
    f["normalizer"] = {{"type", "NFC"}};
    f["added_tokens"] = json::array({json{{"id", 256}, {"content", "caf\u00e9"}, {"special", false}, {"normalized", true}}});
  });
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ(encode_ok(*tok, "un cafe\u0301"), (std::vector<int32_t>{'u', 'n', ' ', 256}));
  EXPECT_EQ(encode_ok(*tok, "un caf\u00e9"), (std::vector<int32_t>{'u', 'n', ' ', 256}));
}

TEST(TokenizerJson, ByteLevelWithGpt2RegexAndPrefixSpace) {
  auto tok = load_edited([](json& f) {
    f["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  });
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ(tok->decode(encode_ok(*tok, "hi there")), " hi there");
  EXPECT_EQ(tok->decode(encode_ok(*tok, " hi")), " hi");  // already starts with a space
}

// ---- the regex split on its own ----------------------------------------------

std::vector<std::string> split(std::string_view pattern, std::string_view text, bool literal = false) {
  auto splitter = RegexSplitter::compile(pattern, literal, "test");
  EXPECT_TRUE(splitter.is_ok()) << splitter.status().to_string();
  std::vector<std::string> pieces;
  RegexSplitter::Scratch scratch;
  EXPECT_TRUE(splitter
                  ->split(text, scratch,
                          [&](std::string_view piece) {
                            pieces.emplace_back(piece);
                            return Status::ok();
                          })
                  .is_ok());
  return pieces;
}

TEST(RegexSplit, IsolatesMatchesAndGapsLikeHuggingFace) {
  using Pieces = std::vector<std::string>;
  EXPECT_EQ(split(kGpt2SplitPattern, "Hello  world's 123!"),
            (Pieces{"Hello", " ", " world", "'s", " 123", "!"}));
  EXPECT_EQ(split("\\s+", "a  b "), (Pieces{"a", "  ", "b", " "}));
  // Empty matches split the gaps they fall in, except right after a match
  // (Oniguruma's iterator, which Hugging Face uses).
  EXPECT_EQ(split("x*", "ab"), (Pieces{"a", "b"}));
  EXPECT_EQ(split("x*", "xxab"), (Pieces{"xx", "a", "b"}));
  EXPECT_EQ(split("x*", "é"), (Pieces{"é"}));
  EXPECT_EQ(split("+", "1+2++3", /*literal=*/true), (Pieces{"1", "+", "2", "+", "+", "3"}));
  EXPECT_TRUE(split("a", "").empty());
  // \s is Unicode White_Space in both engines, NEL included.
  EXPECT_EQ(split("\\s+", "a\u0085\u3000b"), (Pieces{"a", "\u0085\u3000", "b"}));
}

// PCRE2 10.42 has Unicode 14 tables and Oniguruma (Hugging Face) 15.0; the
// patterns are rewritten so that PCRE2 reads them as Oniguruma does
// (unicode_classes.h). DeepSeek-V3's tokenizer splits these differently
// otherwise (tests/tokenizer_published_test.cc has the texts).
TEST(RegexSplit, UnicodeClassesAreThoseOfUnicode15AsInOniguruma) {
  using Pieces = std::vector<std::string>;
  // CJK extension H (U+31350) and Kawi (U+11F04) are letters of Unicode 15.0.
  EXPECT_EQ(split("\\p{L}+", "a\U00031350\U00011F04b c"), (Pieces{"a\U00031350\U00011F04b", " ", "c"}));
  EXPECT_EQ(split("[^\\p{L}]+", "a\U00031350 b"), (Pieces{"a\U00031350", " ", "b"}));
  EXPECT_EQ(split("\\P{L}+", "a\U00031350 b"), (Pieces{"a\U00031350", " ", "b"}));
  EXPECT_EQ(split("\\pL+", "\U00031350 "), (Pieces{"\U00031350", " "}));
  // Kawi digits (U+11F50) are Nd; 🫨 (U+1FAE8, emoji 15.0) is So.
  EXPECT_EQ(split("\\p{N}+", "x\U00011F50\U00011F511"), (Pieces{"x", "\U00011F50\U00011F511"}));
  EXPECT_EQ(split("[\\p{P}\\p{S}]+", "a\U0001FAE8!b"), (Pieces{"a", "\U0001FAE8!", "b"}));
  // U+180E is not White_Space (since Unicode 6.3), though PCRE2's own \s has it.
  EXPECT_EQ(split("\\s+", "a\u180e b"), (Pieces{"a\u180e", " ", "b"}));
  EXPECT_EQ(split("\\s+(?!\\S)", "a  \u180e"), (Pieces{"a", " ", " \u180e"}));
  EXPECT_EQ(split("[^\\s]+", "a\u180e b"), (Pieces{"a\u180e", " ", "b"}));
  // Escapes and classes around them are untouched.
  EXPECT_EQ(split("[\\]\\p{L}]+", "]a]\U00031350 "), (Pieces{"]a]\U00031350", " "}));
  EXPECT_EQ(split("\\p{Han}+", "\u4e2d\u6587 x"), (Pieces{"\u4e2d\u6587", " x"}));
  // utf8proc adds code points PCRE2 lacks, and none that PCRE2 files under
  // another category (which a rewrite could not take away).
  EXPECT_GT(unicode_classes_added_code_points(), 4000u);
  EXPECT_EQ(unicode_classes_changed_code_points(), 0u);
}

}  // namespace
}  // namespace hiq
