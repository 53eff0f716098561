// `hiq sim`: the cache, transfer engine, codecs and scheduler on real bytes,
// with a simulated model and a virtual clock, on SGLang bench_serving-style
// workloads.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "core/units.h"
#include "engine/simulation.h"
#include "kv/model_config.h"
#include "tools/hiq/commands.h"
#include "tools/hiq/flag_errors.h"
#include "tools/hiq/scheduler_json.h"
#include "tools/hiq/host_tier_flags.h"
#include "tools/hiq/scheduler_flags.h"
#include "tools/hiq/table.h"
#include "tools/hiq/workload_flags.h"

namespace hiq::cli {
namespace {

struct SimFlags {
  std::string device = "cpu";
  std::string model = "qwen3-8b";
  int tp = 1;
  int page_size = 1;
  int64_t max_total_tokens = 16384;
  HostTierFlags host;  // 8 GB unless --hicache-size or --hicache-ratio is typed (set where the flags are added)
  WorkloadFlags workload;
  int64_t max_concurrency = 8;
  SchedulerFlags scheduler;
  int transfer_workers = 2;
  std::string step_cost = "constant";
  double client_delay_ms = 5;  // docs/results.md, "The simulator's clients in lockstep"
  bool json = false;
};


Result<SimulationConfig> build_config(const SimFlags& f) {
  SimulationConfig c;
  HIQ_ASSIGN_OR_RETURN(c.backend, parse_sim_backend(f.device));
  GeometryOptions go;
  go.tp_size = f.tp;
  go.page_size = f.page_size;
  HIQ_ASSIGN_OR_RETURN(c.geometry, resolve_model_geometry(f.model, go));
  if (f.max_total_tokens <= 0) return invalid_argument("--max-total-tokens must be positive");
  c.max_total_tokens = static_cast<size_t>(f.max_total_tokens);
  c.hicache = !f.host.none;
  HIQ_ASSIGN_OR_RETURN(c.host, host_tier_options(f.host));
  HIQ_RETURN_IF_ERROR(apply_host_cache_flags(f.host, c.cache));
  if (f.max_concurrency <= 0) return invalid_argument("--max-concurrency must be positive");
  c.max_concurrency = static_cast<size_t>(f.max_concurrency);
  HIQ_RETURN_IF_ERROR(apply_scheduler_flags(f.scheduler, c.scheduler));
  if (f.transfer_workers <= 0) return invalid_argument("--transfer-workers must be positive");
  c.transfer_workers = f.transfer_workers;
  c.client_delay_max_s = f.client_delay_ms / 1e3;  // validate() checks it, named below
  c.client_delay_seed = f.workload.shared_prefix.seed;
  if (f.step_cost == "batch")
    c.cost = SimCostModel::batch_dependent();
  else if (f.step_cost != "constant")
    return invalid_argument("--step-cost must be constant or batch, got '" + f.step_cost + "'");
  HIQ_RETURN_IF_ERROR(with_flag_names(c.validate(), {{"max_total_tokens", "--max-total-tokens"},
                                                     {"max_concurrency", "--max-concurrency"},
                                                     {"transfer_workers", "--transfer-workers"},
                                                     {"client_delay_max_s", "--client-delay-ms"},
                                                     {"max_prefill_tokens", "--max-prefill-tokens"},
                                                     {"max_running_requests", "--max-running-requests"}}));
  return c;
}

int run_sim(const SimFlags& f) {
  auto config = build_config(f);
  if (!config) return report_error("sim", config.status());
  auto source = make_request_source(f.workload);
  if (!source) return report_error("sim", source.status());

  const bool tty = isatty(STDERR_FILENO) != 0;
  auto report = run_simulation(*config, **source, [&](size_t done, size_t total) {
    if (tty) {
      std::fprintf(stderr, "\rhiq sim: %zu/%zu requests", done, total);
      if (done == total) std::fputc('\n', stderr);
    } else if (done == total || done % 32 == 0) {
      std::fprintf(stderr, "hiq sim: %zu/%zu requests\n", done, total);
    }
  });
  if (!report) return report_error("sim", report.status());
  const SimulationReport& r = *report;
  const std::string codec = config->hicache ? f.host.codec : "none";

  if (f.json) {
    const nlohmann::json out = {
        {"device", std::string(sim_backend_name(config->backend))},
        {"model", config->geometry.name},
        {"hicache_codec", codec},
        {"record_align", f.host.record_align},
        {"write_policy", f.host.write_policy},
        {"schedule_policy", f.scheduler.schedule_policy},
        {"max_total_tokens", config->max_total_tokens},
        {"requests", r.requests},
        {"rejected", r.rejected},
        {"prompt_tokens", r.prompt_tokens},
        {"hit_rate", r.hit_rate},
        {"hit_rate_device", r.hit_rate_device},
        {"hit_rate_host", r.hit_rate_host},
        {"l2_capacity_tokens", r.l2_capacity_tokens},
        {"l2_used_tokens", r.l2_used_tokens},
        {"l2_bytes_per_token", r.l2_bytes_per_token},
        {"restored_tokens", r.restored_tokens},
        {"backup_tokens", r.backup_tokens},
        {"l1_evicted_tokens", r.l1_evicted_tokens},
        {"l2_evicted_tokens", r.l2_evicted_tokens},
        {"l1_eviction_waits", r.l1_eviction_waits},
        {"restored_rung_tokens", r.restored_rung_tokens},
        {"backup_rung_tokens", r.backup_rung_tokens},
        {"demoted_rung_tokens", r.demoted_rung_tokens},
        {"demotion_waits", r.demotion_waits},
        {"fragmented_allocations", r.fragmented_allocations},
        {"fragmentation_dropped_tokens", r.fragmentation_dropped_tokens},
        {"restore_failures", r.restore_failures},
        {"backup_failures", r.backup_failures},
        {"verified_tokens", r.verified_tokens},
        {"ttft_ms_mean", r.ttft_mean * 1e3},
        {"ttft_ms_p50", r.ttft_p50 * 1e3},
        {"ttft_ms_p99", r.ttft_p99 * 1e3},
        {"itl_ms_p50", r.itl_p50 * 1e3},
        {"itl_ms_p99", r.itl_p99 * 1e3},
        {"itl_ms_max", r.itl_max * 1e3},
        {"output_tokens_per_s", r.output_tokens_per_s},
        {"virtual_seconds", r.virtual_seconds},
        {"wall_seconds", r.wall_seconds},
        {"scheduler", scheduler_json(r.scheduler)},
    };
    std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    return 0;
  }
  Table t({"metric", "value"});
  t.add_row({"device", std::string(sim_backend_name(config->backend))});
  t.add_row({"model", config->geometry.name});
  t.add_row({"L2 codec", codec});
  t.add_row({"requests (rejected)", format_count(r.requests) + " (" + format_count(r.rejected) + ")"});
  t.add_row({"hit rate", format_fixed(100 * r.hit_rate, 1) + " %"});
  t.add_row({"  from L1 (device)", format_fixed(100 * r.hit_rate_device, 1) + " %"});
  t.add_row({"  from L2 (host)", format_fixed(100 * r.hit_rate_host, 1) + " %"});
  t.add_row({"L2 capacity", format_count(r.l2_capacity_tokens) + " tokens"});
  t.add_row({"L2 used at end", format_count(r.l2_used_tokens) + " tokens"});
  t.add_row({"L2 bytes/token (measured)", format_count(static_cast<uint64_t>(r.l2_bytes_per_token))});
  t.add_row({"tokens restored", format_count(r.restored_tokens)});
  t.add_row({"tokens backed up", format_count(r.backup_tokens)});
  if (!r.restored_rung_tokens.empty()) {
    std::string restored, backed_up, demoted;
    for (size_t i = 0; i < r.restored_rung_tokens.size(); ++i) {
      restored += (i ? " / " : "") + format_count(r.restored_rung_tokens[i]);
      backed_up += (i ? " / " : "") + format_count(r.backup_rung_tokens[i]);
      if (i > 0) demoted += (i > 1 ? " / " : "") + format_count(r.demoted_rung_tokens[i]);
    }
    t.add_row({"restored per rung", restored});
    t.add_row({"backed up per rung", backed_up});
    t.add_row({"demoted to rung 1…", demoted + " (" + format_count(r.demotion_waits) + " waits)"});
    t.add_row({"fragmented allocations", format_count(r.fragmented_allocations) + " (" +
                                             format_count(r.fragmentation_dropped_tokens) + " tokens dropped)"});
  }
  t.add_row({"evicted L1 / L2 tokens", format_count(r.l1_evicted_tokens) + " / " + format_count(r.l2_evicted_tokens)});
  t.add_row({"cached tokens checked", format_count(r.verified_tokens)});
  t.add_row({"TTFT mean / p50 / p99", format_fixed(r.ttft_mean * 1e3, 1) + " / " + format_fixed(r.ttft_p50 * 1e3, 1) + " / " +
                                          format_fixed(r.ttft_p99 * 1e3, 1) + " ms"});
  t.add_row({"ITL p50 / p99 / max", format_fixed(r.itl_p50 * 1e3, 1) + " / " + format_fixed(r.itl_p99 * 1e3, 1) +
                                        " / " + format_fixed(r.itl_max * 1e3, 1) + " ms"});
  t.add_row({"output throughput", format_fixed(r.output_tokens_per_s, 1) + " tok/s (simulated)"});
  t.add_row({"wall time", format_fixed(r.wall_seconds, 2) + " s"});
  t.print(std::cout);
  return 0;
}

}  // namespace

Subcommand add_sim_command(CLI::App& parent) {
  auto f = std::make_shared<SimFlags>();
  f->host.default_size = "8GB";  // when neither --hicache-size nor --hicache-ratio is typed
  CLI::App* app = parent.add_subcommand(
      "sim", "Simulate serving a workload through the hierarchical cache (real cache, codecs and bytes; virtual model)");
  app->add_option("--device", f->device, "Where L1 and the transfer engine run: cpu or cuda")->capture_default_str();
  app->add_option("--model", f->model, "Preset name or config.json path")->capture_default_str();
  app->add_option("--tp", f->tp, "Tensor-parallel ranks")->capture_default_str();
  app->add_option("--page-size", f->page_size, "Tokens per page")->capture_default_str();
  app->add_option("--max-total-tokens", f->max_total_tokens, "L1 capacity in tokens")->capture_default_str();
  add_host_tier_flags(app, f->host);
  add_workload_flags(app, f->workload);
  app->add_option("--max-concurrency", f->max_concurrency, "Requests in the system at once (closed loop)")
      ->capture_default_str();
  add_scheduler_flags(app, f->scheduler);
  app->add_option("--transfer-workers", f->transfer_workers, "CPU transfer engine threads")->capture_default_str();
  app->add_option("--client-delay-ms", f->client_delay_ms,
                  "Each client waits a random 0 … this many ms (seeded by --seed) before each request: the jitter "
                  "that keeps real clients from moving in lockstep")
      ->capture_default_str();
  app->add_option("--step-cost", f->step_cost,
                  "constant: a prefill step costs its new tokens at one rate and a decode step a fixed time; batch: "
                  "also their attention and KV reads, fitted to the H200")
      ->capture_default_str();
  app->add_flag("--json", f->json, "Print one JSON object instead of a table");
  return {app, [f] { return run_sim(*f); }};
}

}  // namespace hiq::cli
