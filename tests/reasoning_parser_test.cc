// The reasoning parsers: thinking and answer split as the formats say, the
// same pieces whatever the increments the text arrives in.
#include "server/reasoning_parser.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>

namespace hiq {
namespace {

using Split = std::pair<std::string, std::string>;  // reasoning, content

Split split_whole(ReasoningFormat format, std::string_view text) {
  ReasoningSplitter s(format);
  auto a = s.feed(text);
  auto b = s.finish();
  return {a.reasoning + b.reasoning, a.content + b.content};
}

// Fed in random pieces (single bytes included): the same split.
Split split_streamed(ReasoningFormat format, std::string_view text, uint64_t seed) {
  std::mt19937_64 rng(seed);
  ReasoningSplitter s(format);
  Split out;
  for (size_t i = 0; i < text.size();) {
    const size_t n = std::min(text.size() - i, static_cast<size_t>(rng() % 5));
    auto piece = s.feed(text.substr(i, n));
    out.first += piece.reasoning;
    out.second += piece.content;
    i += n;
  }
  auto rest = s.finish();
  return {out.first + rest.reasoning, out.second + rest.content};
}

void expect_split(ReasoningFormat format, std::string_view text, const Split& want) {
  SCOPED_TRACE(std::string(text));
  EXPECT_EQ(split_whole(format, text), want);
  for (uint64_t seed = 0; seed < 20; ++seed) EXPECT_EQ(split_streamed(format, text, seed), want) << "seed " << seed;
}

TEST(ReasoningParser, Qwen3SplitsALeadingThinkBlock) {
  const auto q = ReasoningFormat::kQwen3;
  expect_split(q, "<think>\nLet me see.\n</think>\n\nThe answer is 4.", {"Let me see.\n", "The answer is 4."});
  expect_split(q, "The answer is 4.", {"", "The answer is 4."});
  expect_split(q, "  <think>not leading</think>", {"", "  <think>not leading</think>"});
  expect_split(q, "<think>unfinished thought", {"unfinished thought", ""});
  expect_split(q, "<thin", {"", "<thin"});
  expect_split(q, "<think></think>", {"", ""});
  expect_split(q, "<think>a</think>b</think>c", {"a", "b</think>c"});
  expect_split(q, "<think>1 < 2 and </thin> is not a tag</think>ok", {"1 < 2 and </thin> is not a tag", "ok"});
  expect_split(q, "", {"", ""});
}

TEST(ReasoningParser, DeepSeekR1StartsInsideTheThinking) {
  const auto r1 = ReasoningFormat::kDeepSeekR1;
  expect_split(r1, "Hmm.\n</think>\n\nDone.", {"Hmm.\n", "Done."});
  expect_split(r1, "<think>\nHmm.</think>Done.", {"Hmm.", "Done."});
  expect_split(r1, "no end tag", {"no end tag", ""});
}

TEST(ReasoningParser, NoneKeepsEverythingAsContent) {
  expect_split(ReasoningFormat::kNone, "<think>x</think>y", {"", "<think>x</think>y"});
}

TEST(ReasoningParser, NamesAreSGLangs) {
  EXPECT_EQ(*parse_reasoning_format("qwen3"), ReasoningFormat::kQwen3);
  EXPECT_EQ(*parse_reasoning_format("deepseek-r1"), ReasoningFormat::kDeepSeekR1);
  EXPECT_EQ(*parse_reasoning_format(""), ReasoningFormat::kNone);
  const auto bad = parse_reasoning_format("gpt");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("qwen3 and deepseek-r1"), std::string::npos);
}

}  // namespace
}  // namespace hiq
