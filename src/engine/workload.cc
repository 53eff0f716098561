#include "engine/workload.h"

#include <algorithm>
#include <random>
#include <string>

namespace hiq {

namespace {
// "<field> must be positive (got v)": the field's name, which a CLI maps to its flag.
Status positive(long long v, const char* field) {
  if (v > 0) return Status::ok();
  return invalid_argument(std::string(field) + " must be positive (got " + std::to_string(v) + ")");
}
}  // namespace

Status SharedPrefixWorkload::validate() const {
  HIQ_RETURN_IF_ERROR(positive(num_groups, "num_groups"));
  HIQ_RETURN_IF_ERROR(positive(prompts_per_group, "prompts_per_group"));
  if (system_prompt_len < 0) return invalid_argument("system_prompt_len must not be negative");
  if (question_len < 0) return invalid_argument("question_len must not be negative");
  if (static_cast<long long>(system_prompt_len) + question_len <= 0)
    return invalid_argument("system_prompt_len + question_len must be positive (got 0)");
  HIQ_RETURN_IF_ERROR(positive(output_len, "output_len"));
  HIQ_RETURN_IF_ERROR(positive(vocab_size, "vocab_size"));
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

namespace {

class ListSource final : public RequestSource {
 public:
  explicit ListSource(std::vector<Request> requests) : requests_(std::move(requests)) {}
  size_t total() const override { return requests_.size(); }
  std::optional<Request> next(const Request*, std::span<const TokenId>) override {
    if (next_ >= requests_.size()) return std::nullopt;
    return std::move(requests_[next_++]);
  }

 private:
  std::vector<Request> requests_;
  size_t next_ = 0;
};

class MultiTurnSource final : public RequestSource {
 public:
  explicit MultiTurnSource(const MultiTurnWorkload& w) : w_(w), round_(static_cast<size_t>(w.num_clients), 0) {}
  size_t total() const override { return static_cast<size_t>(w_.num_clients) * static_cast<size_t>(w_.num_rounds); }

  std::optional<Request> next(const Request* finished, std::span<const TokenId> output) override {
    if (finished != nullptr) {
      const auto client = static_cast<size_t>(finished->group);
      if (round_[client] < w_.num_rounds) {
        Request r = make(client);
        r.prompt = finished->prompt;
        r.prompt.insert(r.prompt.end(), output.begin(), output.end());
        append_turn(r, client);
        return r;
      }
    }
    if (started_ >= static_cast<size_t>(w_.num_clients)) return std::nullopt;  // every client has begun
    const size_t client = started_++;
    Request r = make(client);
    append_turn(r, client);
    return r;
  }

 private:
  Request make(size_t client) {
    Request r;
    r.id = next_id_++;
    r.group = static_cast<int>(client);
    r.max_new_tokens = w_.output_length;
    return r;
  }
  // The client's new tokens for its current round: a function of (seed,
  // client, round) only, so a run does not depend on timing.
  void append_turn(Request& r, size_t client) {
    std::mt19937_64 rng(w_.seed * 0x9E3779B97F4A7C15ull + client * 1000003ull + static_cast<uint64_t>(round_[client]));
    std::uniform_int_distribution<TokenId> token(0, w_.vocab_size - 1);
    for (int i = 0; i < w_.request_length; ++i) r.prompt.push_back(token(rng));
    ++round_[client];
  }

  MultiTurnWorkload w_;
  std::vector<int> round_;  // rounds each client has sent
  size_t started_ = 0;
  uint64_t next_id_ = 0;
};

}  // namespace

Status MultiTurnWorkload::validate() const {
  HIQ_RETURN_IF_ERROR(positive(num_clients, "num_clients"));
  HIQ_RETURN_IF_ERROR(positive(num_rounds, "num_rounds"));
  HIQ_RETURN_IF_ERROR(positive(request_length, "request_length"));
  HIQ_RETURN_IF_ERROR(positive(output_length, "output_length"));
  HIQ_RETURN_IF_ERROR(positive(vocab_size, "vocab_size"));
  const long long longest = static_cast<long long>(num_rounds) * (request_length + output_length);
  if (num_clients > (1 << 20) || longest > (1LL << 24))
    return out_of_range("the multi-turn workload is too large (" + std::to_string(longest) +
                        " tokens in a conversation's last round)");
  return Status::ok();
}

std::unique_ptr<RequestSource> make_list_source(std::vector<Request> requests) {
  return std::make_unique<ListSource>(std::move(requests));
}

Result<std::unique_ptr<RequestSource>> make_multi_turn_source(const MultiTurnWorkload& workload) {
  HIQ_RETURN_IF_ERROR(workload.validate());
  return std::unique_ptr<RequestSource>(std::make_unique<MultiTurnSource>(workload));
}

}  // namespace hiq
