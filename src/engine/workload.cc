#include "engine/workload.h"

#include <algorithm>
#include <random>
#include <string>

namespace hiq {

Status SharedPrefixWorkload::validate() const {
  const auto positive = [](long long v, const char* flag) -> Status {
    if (v > 0) return Status::ok();
    return invalid_argument(std::string(flag) + " must be positive (got " + std::to_string(v) + ")");
  };
  HIQ_RETURN_IF_ERROR(positive(num_groups, "--gsp-num-groups"));
  HIQ_RETURN_IF_ERROR(positive(prompts_per_group, "--gsp-prompts-per-group"));
  if (system_prompt_len < 0) return invalid_argument("--gsp-system-prompt-len must not be negative");
  if (question_len < 0) return invalid_argument("--gsp-question-len must not be negative");
  HIQ_RETURN_IF_ERROR(positive(static_cast<long long>(system_prompt_len) + question_len,
                               "--gsp-system-prompt-len + --gsp-question-len"));
  HIQ_RETURN_IF_ERROR(positive(output_len, "--gsp-output-len"));
  HIQ_RETURN_IF_ERROR(positive(vocab_size, "vocabulary size"));
  const long long requests = static_cast<long long>(num_groups) * prompts_per_group;
  const long long tokens = requests * (static_cast<long long>(system_prompt_len) + question_len);
  if (requests > (1 << 24) || tokens > (1LL << 34))
    return out_of_range("the workload is too large (" + std::to_string(requests) + " requests, " +
                        std::to_string(tokens) + " prompt tokens)");
  return Status::ok();
}

Result<std::vector<Request>> SharedPrefixWorkload::generate() const {
  HIQ_RETURN_IF_ERROR(validate());
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<TokenId> token(0, vocab_size - 1);
  const auto draw = [&](int n) {
    std::vector<TokenId> out(static_cast<size_t>(n));
    for (auto& t : out) t = token(rng);
    return out;
  };
  std::vector<Request> requests;
  requests.reserve(static_cast<size_t>(num_groups) * static_cast<size_t>(prompts_per_group));
  for (int g = 0; g < num_groups; ++g) {
    const std::vector<TokenId> system = draw(system_prompt_len);
    for (int p = 0; p < prompts_per_group; ++p) {
      Request r;
      r.id = requests.size();
      r.group = g;
      r.max_new_tokens = output_len;
      r.prompt = system;
      const std::vector<TokenId> question = draw(question_len);
      r.prompt.insert(r.prompt.end(), question.begin(), question.end());
      requests.push_back(std::move(r));
    }
  }
  if (shuffle) std::shuffle(requests.begin(), requests.end(), rng);
  return requests;
}

}  // namespace hiq
