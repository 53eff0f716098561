// loadgen/load_generator.h — `hiq bench serve`: drives a running server with
// the workloads of `hiq sim` (engine/workload.h) over the OpenAI API and
// measures what clients see, as SGLang's bench_serving does.
//
// `max_concurrency` client threads form a closed loop: each takes the next
// request of the workload (for multi-turn, its conversation's next round,
// built on the previous answer), sends it as a streaming /v1/completions call
// with token-id prompts, `temperature` 0, `ignore_eos` and `max_tokens` =
// the workload's output length, and reads the events. An optional
// `request_rate` spaces the starts as a Poisson process. Per request: time to
// first token, the gaps between tokens, end-to-end latency, and the usage
// (prompt tokens, cached tokens by tier).
#pragma once

#include <functional>
#include <limits>
#include <string>

#include "core/status.h"
#include "engine/workload.h"

namespace hiq {

struct LoadOptions {
  std::string host = "127.0.0.1";
  int port = 30000;
  std::string api_key;               // sent as Authorization: Bearer, when set
  int max_concurrency = 8;           // --max-concurrency: client threads
  double request_rate = std::numeric_limits<double>::infinity();  // --request-rate: starts per second (Poisson)
  uint64_t seed = 1;                 // of the arrival times
  double timeout_seconds = 600;      // one request's limit
};

struct LatencySummary {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;  // seconds
};

struct LoadReport {
  size_t requests = 0, failed = 0;
  std::string first_error;           // of the first failed request
  double duration_seconds = 0;
  uint64_t prompt_tokens = 0, completion_tokens = 0;
  uint64_t cached_device_tokens = 0, cached_host_tokens = 0;  // prompt tokens from L1 / restored from L2
  uint64_t cached_storage_tokens = 0;  // fetched from storage (L3) for the request, then restored (not in host's)
  double hit_rate = 0, hit_rate_device = 0, hit_rate_host = 0, hit_rate_storage = 0;  // cached ÷ prompt tokens
  double request_throughput = 0, output_throughput = 0;  // per second
  LatencySummary ttft, itl, e2e;
};

// The vocabulary size the server reports in /v1/models (ours do: `vocab_size`).
Result<int> server_vocab_size(const LoadOptions& options);

// Runs `source` to its end against the server. Errors: a server that cannot
// be reached before the first request (kUnavailable). Failed requests are
// counted, not fatal. `progress(done, total)` after each request; may be null.
Result<LoadReport> run_load(const LoadOptions& options, RequestSource& source,
                            const std::function<void(size_t, size_t)>& progress = nullptr);

}  // namespace hiq
