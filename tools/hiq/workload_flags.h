// tools/hiq/workload_flags.h — the workload flags of SGLang's bench_serving
// (--dataset-name, --gsp-*, the multi-turn ones, --seed) that `hiq sim` and
// `hiq bench serve` share, so a simulated and a real run see the same
// requests; registered and turned into a request source in one place.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/workload.h"
#include "tools/hiq/flag_errors.h"

namespace hiq::cli {

// Commands may change the defaults before registering.
struct WorkloadFlags {
  std::string dataset = "generated-shared-prefix";  // --dataset-name
  SharedPrefixWorkload shared_prefix;               // --gsp-*, --seed
  MultiTurnWorkload multi_turn;                     // --num-clients, --num-rounds, --request-length, --output-length
};

inline void add_workload_flags(CLI::App* app, WorkloadFlags& flags) {
  WorkloadFlags* f = &flags;
  SharedPrefixWorkload* w = &f->shared_prefix;
  MultiTurnWorkload* m = &f->multi_turn;
  app->add_option("--dataset-name", f->dataset, "Workload: generated-shared-prefix or multi-turn")->capture_default_str();
  app->add_option("--gsp-num-groups", w->num_groups, "Shared-prefix groups")->capture_default_str();
  app->add_option("--gsp-prompts-per-group", w->prompts_per_group, "Prompts per group")->capture_default_str();
  app->add_option("--gsp-system-prompt-len", w->system_prompt_len, "Shared prefix tokens")->capture_default_str();
  app->add_option("--gsp-question-len", w->question_len, "Per-prompt tokens after the prefix")->capture_default_str();
  app->add_option("--gsp-output-len", w->output_len, "Tokens generated per request")->capture_default_str();
  app->add_option("--num-clients", m->num_clients, "multi-turn: conversations")->capture_default_str();
  app->add_option("--num-rounds", m->num_rounds, "multi-turn: rounds per conversation")->capture_default_str();
  app->add_option("--request-length", m->request_length, "multi-turn: new tokens per round")->capture_default_str();
  app->add_option("--output-length", m->output_length, "multi-turn: tokens generated per round")->capture_default_str();
  app->add_option("--seed", w->seed, "Seed of the workload's tokens and order")->capture_default_str();
}

// The requests of the chosen workload, token ids drawn below `vocab_size`
// (0: the workload's default). Errors name the flag.
inline Result<std::unique_ptr<RequestSource>> make_request_source(const WorkloadFlags& f, int vocab_size = 0) {
  if (f.dataset == "generated-shared-prefix") {
    SharedPrefixWorkload w = f.shared_prefix;
    if (vocab_size > 0) w.vocab_size = vocab_size;
    HIQ_RETURN_IF_ERROR(with_flag_names(w.validate(), {{"num_groups", "--gsp-num-groups"},
                                                       {"prompts_per_group", "--gsp-prompts-per-group"},
                                                       {"system_prompt_len + question_len",
                                                        "--gsp-system-prompt-len + --gsp-question-len"},
                                                       {"system_prompt_len", "--gsp-system-prompt-len"},
                                                       {"question_len", "--gsp-question-len"},
                                                       {"output_len", "--gsp-output-len"},
                                                       {"vocab_size", "the model's vocabulary size"}}));
    HIQ_ASSIGN_OR_RETURN(std::vector<Request> requests, w.generate());
    return make_list_source(std::move(requests));
  }
  if (f.dataset == "multi-turn") {
    MultiTurnWorkload w = f.multi_turn;
    w.seed = f.shared_prefix.seed;
    if (vocab_size > 0) w.vocab_size = vocab_size;
    HIQ_RETURN_IF_ERROR(with_flag_names(w.validate(), {{"num_clients", "--num-clients"},
                                                       {"num_rounds", "--num-rounds"},
                                                       {"request_length", "--request-length"},
                                                       {"output_length", "--output-length"},
                                                       {"vocab_size", "the model's vocabulary size"}}));
    return make_multi_turn_source(w);
  }
  return invalid_argument("--dataset-name '" + f.dataset + "' is not one of generated-shared-prefix, multi-turn");
}

}  // namespace hiq::cli
