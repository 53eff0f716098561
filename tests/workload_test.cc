// The generated-shared-prefix workload: shapes, sharing, reproducibility, errors.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "engine/workload.h"

namespace hiq {
namespace {

TEST(SharedPrefixWorkload, ExperimentBShape) {
  SharedPrefixWorkload w;  // defaults: 32 groups × 4 prompts, prefix 2048, question 64, output 32
  auto requests = w.generate();
  ASSERT_TRUE(requests.is_ok());
  ASSERT_EQ(requests->size(), 128u);
  std::map<int, std::vector<const Request*>> groups;
  std::set<uint64_t> ids;
  for (const Request& r : *requests) {
    EXPECT_EQ(r.prompt.size(), 2048u + 64u);
    EXPECT_EQ(r.max_new_tokens, 32);
    EXPECT_TRUE(ids.insert(r.id).second);
    for (TokenId t : r.prompt) ASSERT_TRUE(t >= 0 && t < w.vocab_size);
    groups[r.group].push_back(&r);
  }
  ASSERT_EQ(groups.size(), 32u);
  for (const auto& [g, members] : groups) {
    ASSERT_EQ(members.size(), 4u);
    for (const Request* r : members) {
      // Same system prompt within a group, different questions.
      EXPECT_TRUE(std::equal(r->prompt.begin(), r->prompt.begin() + 2048, members[0]->prompt.begin()));
      if (r != members[0]) {
        EXPECT_FALSE(std::equal(r->prompt.begin() + 2048, r->prompt.end(), members[0]->prompt.begin() + 2048));
      }
    }
  }
  EXPECT_FALSE(std::equal(groups[0][0]->prompt.begin(), groups[0][0]->prompt.begin() + 2048,
                          groups[1][0]->prompt.begin()));
}

TEST(SharedPrefixWorkload, SeedDecidesEverything) {
  SharedPrefixWorkload w;
  w.num_groups = 4;
  w.system_prompt_len = 16;
  w.question_len = 4;
  auto a = *w.generate(), b = *w.generate();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, b[i].id);
    EXPECT_EQ(a[i].prompt, b[i].prompt);
  }
  w.seed = 2;
  auto c = *w.generate();
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) differs |= a[i].prompt != c[i].prompt;
  EXPECT_TRUE(differs);
  w.seed = 1;
  w.shuffle = false;
  auto ordered = *w.generate();
  for (size_t i = 0; i < ordered.size(); ++i) EXPECT_EQ(ordered[i].id, i);
  bool shuffled = false;
  for (size_t i = 0; i < a.size(); ++i) shuffled |= a[i].id != i;
  EXPECT_TRUE(shuffled) << "the default order is a seeded shuffle";
}

// Errors start with the field's name (the CLI maps it to its flag; a library
// never names flags).
TEST(SharedPrefixWorkload, ErrorsNameTheField) {
  SharedPrefixWorkload w;
  w.num_groups = 0;
  EXPECT_EQ(w.generate().status().message(), "num_groups must be positive (got 0)");
  w = {};
  w.output_len = -1;
  EXPECT_EQ(w.validate().message(), "output_len must be positive (got -1)");
  w = {};
  w.question_len = -5;
  EXPECT_EQ(w.validate().message(), "question_len must not be negative");
  w = {};
  w.question_len = 0;
  w.system_prompt_len = 0;
  EXPECT_EQ(w.validate().message(), "system_prompt_len + question_len must be positive (got 0)");
  w = {};
  w.num_groups = 1 << 20;
  w.prompts_per_group = 1 << 10;
  EXPECT_EQ(w.validate().code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace hiq

namespace hiq {
namespace {

TEST(MultiTurnWorkload, EachRoundExtendsTheConversationWithTheAnswer) {
  MultiTurnWorkload w;
  w.num_clients = 3;
  w.num_rounds = 3;
  w.request_length = 5;
  w.output_length = 2;
  w.vocab_size = 100;
  auto source = make_multi_turn_source(w);
  ASSERT_TRUE(source.is_ok());
  RequestSource& s = **source;
  EXPECT_EQ(s.total(), 9u);
  std::vector<Request> firsts;
  for (int c = 0; c < 3; ++c) firsts.push_back(*s.next(nullptr, {}));
  EXPECT_FALSE(s.next(nullptr, {}).has_value()) << "three clients, all started";
  EXPECT_EQ(firsts[0].prompt.size(), 5u);
  EXPECT_NE(firsts[0].prompt, firsts[1].prompt);
  const std::vector<TokenId> answer = {7, 8};
  auto second = s.next(&firsts[1], answer);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->group, firsts[1].group);
  ASSERT_EQ(second->prompt.size(), 5u + 2 + 5);
  EXPECT_TRUE(std::equal(firsts[1].prompt.begin(), firsts[1].prompt.end(), second->prompt.begin()));
  EXPECT_EQ(second->prompt[5], 7);
  EXPECT_EQ(second->prompt[6], 8);
  auto third = s.next(&*second, answer);
  ASSERT_TRUE(third.has_value());
  EXPECT_EQ(third->prompt.size(), 12u + 2 + 5);
  EXPECT_FALSE(s.next(&*third, answer).has_value()) << "after its last round a client has nothing to send";

  // The tokens of a round depend only on (seed, client, round): a second source agrees.
  auto again = make_multi_turn_source(w);
  EXPECT_EQ((*again)->next(nullptr, {})->prompt, firsts[0].prompt);
}

TEST(MultiTurnWorkload, ErrorsNameTheField) {
  MultiTurnWorkload w;
  w.num_rounds = 0;
  EXPECT_NE(make_multi_turn_source(w).status().message().find("num_rounds must be positive"), std::string::npos);
  w = {};
  w.request_length = -1;
  EXPECT_NE(w.validate().message().find("request_length must be positive"), std::string::npos);
}

}  // namespace
}  // namespace hiq
