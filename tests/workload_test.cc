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

TEST(SharedPrefixWorkload, ErrorsNameTheFlag) {
  SharedPrefixWorkload w;
  w.num_groups = 0;
  EXPECT_NE(w.generate().status().message().find("--gsp-num-groups"), std::string::npos);
  w = {};
  w.output_len = -1;
  EXPECT_NE(w.validate().message().find("--gsp-output-len"), std::string::npos);
  w = {};
  w.question_len = -5;
  EXPECT_NE(w.validate().message().find("--gsp-question-len"), std::string::npos);
  w = {};
  w.num_groups = 1 << 20;
  w.prompts_per_group = 1 << 10;
  EXPECT_EQ(w.validate().code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace hiq
