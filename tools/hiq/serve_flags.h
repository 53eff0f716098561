// tools/hiq/serve_flags.h — the flags that build a ServingStack (model,
// device, L1, L2 and cache policy, scheduler), shared by `hiq serve` and the
// in-process mode of `hiq bench serve`.
#pragma once

#include <CLI/CLI.hpp>

#include "codec/codec.h"
#include "core/units.h"
#include "server/http_server.h"
#include "tools/hiq/host_tier_flags.h"

namespace hiq::cli {

struct ServeFlags {
  ServeConfig config;
  HttpOptions http;
  int64_t max_total_tokens = 0;
  std::string hicache_size = "0";
  double hicache_ratio = 2.0;
  int64_t hicache_tokens = 0;
  std::string write_policy = "write_through";
  std::string codec = "int8";
  int64_t record_align = static_cast<int64_t>(kDefaultRecordAlign);
  bool no_hicache = false;
  int64_t max_prefill_tokens = 16384;
  int64_t max_running_requests = 256;
};

inline Result<ServeConfig> build_stack_config(const ServeFlags& f) {
  ServeConfig c = f.config;
  if (f.max_total_tokens < 0) return invalid_argument("--max-total-tokens must not be negative");
  c.max_total_tokens = static_cast<size_t>(f.max_total_tokens);
  if (c.page_size < 1) return invalid_argument("--page-size must be positive");
  c.hicache = !f.no_hicache;
  HIQ_ASSIGN_OR_RETURN(c.host, host_tier_options(f.codec, f.record_align, f.hicache_size, f.hicache_ratio));
  if (f.hicache_tokens < 0) return invalid_argument("--hicache-tokens must not be negative");
  c.host.capacity_tokens = static_cast<uint64_t>(f.hicache_tokens);
  HIQ_ASSIGN_OR_RETURN(c.cache.write_policy, parse_write_policy(f.write_policy));
  if (f.max_prefill_tokens <= 0) return invalid_argument("--max-prefill-tokens must be positive");
  c.scheduler.max_prefill_tokens = static_cast<size_t>(f.max_prefill_tokens);
  if (f.max_running_requests <= 0) return invalid_argument("--max-running-requests must be positive");
  c.scheduler.max_running_requests = static_cast<size_t>(f.max_running_requests);
  return c;
}

// Registers the flags of ServeFlags::config and the cache (not --host/--port/--api-key).
inline void add_stack_flags(CLI::App* app, ServeFlags& flags) {
  ServeFlags* f = &flags;
  app->add_option("--device", f->config.device, "cpu or cuda")->capture_default_str();
  app->add_option("--served-model-name", f->config.served_model_name, "Model name in the API (default: the directory)");
  app->add_option("--max-total-tokens", f->max_total_tokens, "L1 capacity in tokens (0: 8192 cpu, 65536 cuda)")
      ->capture_default_str();
  app->add_option("--page-size", f->config.page_size, "Tokens per page")->capture_default_str();
  app->add_option("--hicache-size", f->hicache_size, "Host (L2) budget: 8GB, 8GiB; 0 uses --hicache-ratio")
      ->capture_default_str();
  app->add_option("--hicache-ratio", f->hicache_ratio, "L2 tokens per L1 token, when --hicache-size is 0")
      ->capture_default_str();
  app->add_option("--hicache-tokens", f->hicache_tokens,
                  "L2 capacity in tokens whatever the codec (overrides --hicache-size; 0: off)")
      ->capture_default_str();
  app->add_option("--hicache-write-policy", f->write_policy, "write_through, write_through_selective or write_back")
      ->capture_default_str();
  app->add_option("--hicache-codec", f->codec, "L2 codec: bf16, int8, fp8, int4, int4h")->capture_default_str();
  app->add_option("--record-align", f->record_align, "Pad L2 records to a multiple of this many bytes")
      ->capture_default_str();
  app->add_flag("--no-hicache", f->no_hicache, "No host tier: L1 only");
  app->add_option("--max-prefill-tokens", f->max_prefill_tokens, "New prompt tokens per prefill step")
      ->capture_default_str();
  app->add_option("--max-running-requests", f->max_running_requests, "Requests running at once")
      ->capture_default_str();
}

}  // namespace hiq::cli
