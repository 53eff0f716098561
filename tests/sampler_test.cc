// The sampler: greedy is the argmax; temperature sampling follows the softmax
// (checked by frequency); top-k and top-p cut the tail; the same seed gives
// the same draws; bad parameters are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/sampler.h"

namespace hiq {
namespace {

TEST(Sampler, GreedyIsTheArgmaxAndTheFirstOnTies) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, NAN};
  std::mt19937_64 rng(1);
  EXPECT_EQ(argmax_token(logits), 1);
  EXPECT_EQ(sample_token(logits, SamplingParams{}, rng), 1);
  SamplingParams top1;
  top1.temperature = 1.0f;
  top1.top_k = 1;
  EXPECT_EQ(sample_token(logits, top1, rng), 1);
}

std::vector<double> frequencies(const std::vector<float>& logits, const SamplingParams& p, int draws) {
  std::mt19937_64 rng(p.seed);
  std::vector<double> f(logits.size());
  for (int i = 0; i < draws; ++i) f[static_cast<size_t>(sample_token(logits, p, rng))] += 1.0 / draws;
  return f;
}

TEST(Sampler, TemperatureSamplingFollowsTheSoftmax) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 7;
  const auto f = frequencies(logits, p, 40000);
  EXPECT_NEAR(f[0], 0.5, 0.01);
  EXPECT_NEAR(f[1], 0.3, 0.01);
  EXPECT_NEAR(f[2], 0.2, 0.01);
  // Temperature 0.5 squares the odds: 25 : 9 : 4.
  p.temperature = 0.5f;
  const auto g = frequencies(logits, p, 40000);
  EXPECT_NEAR(g[0], 25.0 / 38, 0.01);
  EXPECT_NEAR(g[2], 4.0 / 38, 0.01);
}

TEST(Sampler, TopKAndTopPCutTheTail) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SamplingParams k2;
  k2.temperature = 1.0f;
  k2.top_k = 2;
  const auto f = frequencies(logits, k2, 20000);
  EXPECT_EQ(f[2], 0.0);
  EXPECT_NEAR(f[0], 0.625, 0.015);
  SamplingParams p6;
  p6.temperature = 1.0f;
  p6.top_p = 0.6f;  // 0.5 < 0.6 ≤ 0.8: the two most likely
  const auto g = frequencies(logits, p6, 20000);
  EXPECT_EQ(g[2], 0.0);
  EXPECT_NEAR(g[0], 0.625, 0.015);
  SamplingParams tiny;
  tiny.temperature = 1.0f;
  tiny.top_p = 0.01f;  // the top token alone
  EXPECT_NEAR(frequencies(logits, tiny, 1000)[0], 1.0, 1e-9);
}

TEST(Sampler, TheSameSeedGivesTheSameDraws) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
  SamplingParams p;
  p.temperature = 1.0f;
  std::mt19937_64 a(42), b(42), c(43);
  std::vector<int32_t> x, y, z;
  for (int i = 0; i < 50; ++i) {
    x.push_back(sample_token(logits, p, a));
    y.push_back(sample_token(logits, p, b));
    z.push_back(sample_token(logits, p, c));
  }
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
}

TEST(Sampler, BadParametersAreRefusedByName) {
  SamplingParams p;
  EXPECT_TRUE(p.validate().is_ok());
  p.temperature = 2.5f;
  EXPECT_NE(p.validate().message().find("temperature"), std::string::npos);
  p = {};
  p.top_p = 0.0f;
  EXPECT_NE(p.validate().message().find("top_p"), std::string::npos);
  p = {};
  p.top_k = 0;
  EXPECT_NE(p.validate().message().find("top_k"), std::string::npos);
  p = {};
  p.temperature = NAN;
  EXPECT_FALSE(p.validate().is_ok());
}

TEST(Sampler, TokenLogprobsAreTheLogSoftmaxWithTheTopAlternatives) {
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
  double total = 0;
  for (float l : logits) total += std::exp(static_cast<double>(l));
  const auto expected = [&](size_t i) { return static_cast<float>(logits[i] - std::log(total)); };
  const TokenLogprobs lp = token_logprobs(logits, 4, 3);
  EXPECT_EQ(lp.token, 4);
  EXPECT_NEAR(lp.logprob, expected(4), 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  // Most likely first; of equal logits, the lower id first.
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_EQ(lp.top[2].first, 0);
  for (const auto& [id, logprob] : lp.top) EXPECT_NEAR(logprob, expected(static_cast<size_t>(id)), 1e-6);
  // The probabilities sum to one.
  double sum = 0;
  for (const auto& [id, logprob] : token_logprobs(logits, 0, 5).top) sum += std::exp(static_cast<double>(logprob));
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_TRUE(token_logprobs(logits, 2, 0).top.empty());
  EXPECT_EQ(token_logprobs(logits, 2, 99).top.size(), logits.size());  // clamped to what there is
}

TEST(Sampler, TokenLogprobsOfNanAndInfiniteLogits) {
  const std::vector<float> logits = {NAN, 0.0f, -INFINITY, 0.0f};
  const TokenLogprobs lp = token_logprobs(logits, 0, 4);
  EXPECT_TRUE(std::isinf(lp.logprob) && lp.logprob < 0) << "NaN counts as -inf";
  ASSERT_EQ(lp.top.size(), 4u);
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_NEAR(lp.top[0].second, std::log(0.5), 1e-6);
  EXPECT_EQ(lp.top[3].first, 0) << "NaN last";
  EXPECT_TRUE(std::isinf(token_logprobs(logits, 2, 0).logprob));
  EXPECT_TRUE(std::isinf(token_logprobs(logits, 7, 0).logprob)) << "an id outside the row";
  const std::vector<float> none = {NAN, -INFINITY};
  EXPECT_TRUE(std::isinf(token_logprobs(none, 1, 1).logprob));
}

}  // namespace
}  // namespace hiq
