// tools/hiq/scheduler_flags.h — the scheduler's flags, shared by `hiq sim`,
// `hiq serve` and `hiq bench serve` (SGLang's names).
#pragma once

#include <algorithm>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/scheduler.h"
#include "tools/hiq/flag_errors.h"

namespace hiq::cli {

struct SchedulerFlags {
  int64_t max_prefill_tokens = 16384;
  int64_t max_running_requests = 256;
  std::string schedule_policy = "lpm";
  int64_t max_overtakes = 64;
  double conservativeness = 1.0;
  int64_t chunked_prefill_size = 8192;
};

// Fills `options`' scheduling fields; errors name the flag.
inline Status apply_scheduler_flags(const SchedulerFlags& f, SchedulerOptions& options) {
  if (f.max_prefill_tokens <= 0) return invalid_argument("--max-prefill-tokens must be positive");
  options.max_prefill_tokens = static_cast<size_t>(f.max_prefill_tokens);
  if (f.max_running_requests <= 0) return invalid_argument("--max-running-requests must be positive");
  options.max_running_requests = static_cast<size_t>(f.max_running_requests);
  auto policy = parse_schedule_policy(f.schedule_policy);
  HIQ_RETURN_IF_ERROR(with_flag_names(policy.status(), {{"schedule_policy", "--schedule-policy"}}));
  options.policy = *policy;
  if (f.max_overtakes < 0) return invalid_argument("--schedule-max-overtakes must not be negative");
  options.max_overtakes = static_cast<size_t>(f.max_overtakes);
  // SGLang's mapping: the ratios scale with it, capped at 1 (≥ 10.2: every
  // output counted, never a retraction).
  if (!(f.conservativeness > 0)) return invalid_argument("--schedule-conservativeness must be positive");
  const SchedulerOptions defaults;
  options.new_token_ratio = std::min(1.0, defaults.new_token_ratio * f.conservativeness);
  options.min_new_token_ratio = std::min(options.new_token_ratio, defaults.min_new_token_ratio * f.conservativeness);
  if (f.chunked_prefill_size < -1) return invalid_argument("--chunked-prefill-size must be positive, or -1 or 0 (off)");
  options.chunked_prefill_size = static_cast<size_t>(std::max<int64_t>(0, f.chunked_prefill_size));
  return Status::ok();
}

inline void add_scheduler_flags(CLI::App* app, SchedulerFlags& flags) {
  SchedulerFlags* f = &flags;
  app->add_option("--max-prefill-tokens", f->max_prefill_tokens, "New prompt tokens per prefill step")
      ->capture_default_str();
  app->add_option("--max-running-requests", f->max_running_requests, "Requests running at once")
      ->capture_default_str();
  app->add_option("--schedule-policy", f->schedule_policy,
                  "Admission order: fcfs (arrival) or lpm (longest cached prefix first)")
      ->capture_default_str();
  app->add_option("--schedule-max-overtakes", f->max_overtakes,
                  "lpm: a request passed over by this many later arrivals goes first")
      ->capture_default_str();
  app->add_option("--schedule-conservativeness", f->conservativeness,
                  "Scales the share of outputs not yet generated that admission counts (0.7 at 1, decaying to "
                  "0.098); decode retracts requests when L1 runs out. 10.2 or more: count every output")
      ->capture_default_str();
  app->add_option("--chunked-prefill-size", f->chunked_prefill_size,
                  "Prefill a longer prompt in chunks of this many tokens, alternating with decode steps (-1 or 0: off)")
      ->capture_default_str();
}

}  // namespace hiq::cli
