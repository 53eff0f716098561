// engine/workload.h — request streams for `hiq sim` and `hiq bench serve`.
//
// The generated-shared-prefix workload of SGLang's bench_serving: `num_groups`
// groups, each with its own system prompt of `system_prompt_len` tokens shared
// by `prompts_per_group` prompts, each prompt adding its own question of
// `question_len` tokens and asking for `output_len` new tokens. Token ids are
// drawn uniformly from the vocabulary by a generator seeded with `seed`, and
// the request order is a shuffle seeded the same way, so a run is reproducible
// and two runs with the same flags see the same requests.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "cache/radix_cache.h"
#include "core/status.h"
#include "engine/sampler.h"

namespace hiq {

struct Request {
  uint64_t id = 0;
  std::vector<TokenId> prompt;
  int max_new_tokens = 0;
  int group = -1;  // the shared-prefix group, for reports; -1 when none
  SamplingParams sampling;               // greedy by default
  std::vector<TokenId> stop_token_ids;   // generating one of these ends the request (it is kept in the output)
  int logprobs = -1;                     // -1: none; k ≥ 0: each output token's log-probability and k alternatives
  // Every prompt token's log-probability too (OpenAI's echo with logprobs).
  // Such a request computes its whole prompt: the logits of a cached prefix
  // were never computed, so it reuses no cached KV (it still inserts its own).
  bool prompt_logprobs = false;
};

struct SharedPrefixWorkload {
  int num_groups = 32;          // --gsp-num-groups
  int prompts_per_group = 4;    // --gsp-prompts-per-group
  int system_prompt_len = 2048; // --gsp-system-prompt-len
  int question_len = 64;        // --gsp-question-len
  int output_len = 32;          // --gsp-output-len
  int vocab_size = 151936;      // token ids are drawn from [0, vocab_size)
  uint64_t seed = 1;            // --seed
  bool shuffle = true;          // seeded shuffle of the request order

  // Errors name the first field out of range ("num_groups must be ..."); a
  // CLI maps the name to its flag.
  Status validate() const;
  // The requests, in the order they are submitted.
  Result<std::vector<Request>> generate() const;
};

// Multi-turn chat: `num_clients` conversations of `num_rounds` rounds. Each
// round sends the whole conversation so far — earlier prompts and the model's
// answers — plus `request_length` new tokens, and asks for `output_length`
// tokens. A round is sent when the client's previous round finishes, so its
// prompt holds the previous answer. Flags as SGLang's multi-turn HiCache
// benchmark: --num-clients, --num-rounds, --request-length, --output-length.
struct MultiTurnWorkload {
  int num_clients = 16;
  int num_rounds = 4;
  int request_length = 512;
  int output_length = 64;
  int vocab_size = 151936;
  uint64_t seed = 1;
  Status validate() const;
};

// Feeds a closed-loop simulation: the first request of each of
// `concurrency` clients, then each client's next request as its last one
// finishes.
class RequestSource {
 public:
  virtual ~RequestSource() = default;
  virtual size_t total() const = 0;
  // A request for a client that starts (finished == nullptr) or whose request
  // `finished` (with its prompt and output) just completed; nullopt when there
  // is nothing more for it to send.
  virtual std::optional<Request> next(const Request* finished, std::span<const TokenId> output) = 0;
};

// The requests of a list, in order, whoever asks.
std::unique_ptr<RequestSource> make_list_source(std::vector<Request> requests);
Result<std::unique_ptr<RequestSource>> make_multi_turn_source(const MultiTurnWorkload& workload);

}  // namespace hiq
