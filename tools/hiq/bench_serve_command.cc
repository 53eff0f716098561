// `hiq bench serve`: the load generator (loadgen/load_generator.h) against a
// running server, or against one it starts in-process with --model DIR and
// the cache flags of `hiq serve`. Takes the workload flags of `hiq sim`, so a
// simulated and a real run can be compared line by line.
//
// In-process, --compare runs the workload once per host-tier configuration on
// one loaded model, each on a fresh cache and engine: `--repeats` times, in
// the order of compare_order.h (forward, then backward, each pair starting one
// configuration later) so that a drift of the machine over time does not
// favour one of them and every configuration takes every place; and with
// --sweep-num-groups, once per working-set size. With --json
// each run prints one JSON line as it ends.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "loadgen/load_generator.h"
#include "tools/hiq/commands.h"
#include "tools/hiq/compare_order.h"
#include "tools/hiq/list_flag.h"
#include "tools/hiq/scheduler_json.h"
#include "tools/hiq/serve_flags.h"
#include "tools/hiq/table.h"
#include "tools/hiq/workload_flags.h"

namespace hiq::cli {
namespace {

// One host-tier configuration of --compare: "none" (no L2), a codec, or
// codec/align ("int8/128"); a ladder may end in @device, where its
// demotions run ("tiered:int8,int4h@cpu").
struct TierConfig {
  std::string label;
  bool hicache = true;
  std::string codec;
  int64_t record_align = 0;
  std::string demotion_device;  // empty: --hicache-demotion-device's
};

struct BenchServeFlags {
  ServeFlags stack;  // in-process mode: --model and the cache flags
  LoadOptions load;
  WorkloadFlags workload;
  int vocab_size = 0;  // 0: from the server's /v1/models
  std::string compare;               // --compare: configurations, comma-separated
  int repeats = 1;                   // --repeats
  std::string sweep_num_groups;      // --sweep-num-groups: group counts, comma-separated
  bool warmup = true;                // --compare: an unrecorded run first (--no-warmup: none)
  bool json = false;
};

Result<std::vector<TierConfig>> parse_compare(const std::string& list, int64_t default_align) {
  std::vector<TierConfig> configs;
  HIQ_ASSIGN_OR_RETURN(const std::vector<std::string> items, parse_list_flag(list, "--compare", ListRepeats::kAllow));
  for (const std::string& item : join_kv_codec_items(items)) {
    for (const TierConfig& seen : configs)
      if (seen.label == item) return invalid_argument("--compare: '" + item + "' is given twice");
    TierConfig c;
    c.label = item;
    if (item == "none") {
      c.hicache = false;
      c.codec = "bf16";
      c.record_align = default_align;
    } else {
      const size_t at = item.find('@');
      const std::string tier = item.substr(0, at);
      const size_t slash = tier.find('/');
      c.codec = tier.substr(0, slash);
      HostKvPoolOptions parsed;
      HIQ_RETURN_IF_ERROR(parse_host_codec(c.codec, parsed).with_context("--compare " + item));
      if (at != std::string::npos) {
        c.demotion_device = item.substr(at + 1);
        if (parsed.demotion.empty())
          return invalid_argument("--compare " + item + ": '@" + c.demotion_device +
                                  "' says where a ladder's demotions run, and " + c.codec + " is not a ladder");
        if (!parse_demotion_device(c.demotion_device))
          return invalid_argument("--compare " + item + ": a ladder demotes @auto, @cpu or @gpu, not '@" +
                                  c.demotion_device + "'");
      }
      c.record_align = default_align;
      if (slash != std::string::npos) {
        const std::string align = tier.substr(slash + 1);
        if (align.empty() || align.find_first_not_of("0123456789") != std::string::npos || align.size() > 6)
          return invalid_argument("--compare " + item + ": the alignment after '/' must be a number of bytes");
        c.record_align = std::stoll(align);
      }
    }
    configs.push_back(std::move(c));
  }
  return configs;
}

std::string ms(double s) { return format_fixed(s * 1e3, 1); }

nlohmann::json latency_json(const LatencySummary& s) {
  return nlohmann::json{{"mean", s.mean}, {"p50", s.p50}, {"p90", s.p90}, {"p99", s.p99}, {"max", s.max}};
}

double rate(uint64_t bytes, double seconds) { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0; }

// What the clients measured, and what the in-process server (when there is
// one) counted: its tiers, and the bytes and time of its restores and backups.
nlohmann::json report_json(const LoadReport& r, ServingStack* stack) {
  nlohmann::json out = {{"requests", r.requests},
                        {"failed", r.failed},
                        {"first_error", r.first_error},
                        {"duration_s", r.duration_seconds},
                        {"prompt_tokens", r.prompt_tokens},
                        {"completion_tokens", r.completion_tokens},
                        {"cached_device_tokens", r.cached_device_tokens},
                        {"cached_host_tokens", r.cached_host_tokens},
                        {"cached_storage_tokens", r.cached_storage_tokens},
                        {"hit_rate", r.hit_rate},
                        {"hit_rate_device", r.hit_rate_device},
                        {"hit_rate_host", r.hit_rate_host},
                        {"hit_rate_storage", r.hit_rate_storage},
                        {"request_throughput", r.request_throughput},
                        {"output_throughput", r.output_throughput},
                        {"ttft_s", latency_json(r.ttft)},
                        {"itl_s", latency_json(r.itl)},
                        {"e2e_s", latency_json(r.e2e)}};
  if (!stack) return out;
  const ServingStats s = stack->engine().stats();
  const TransferStats& t = s.transfer;
  const HostKvPool* l2 = stack->host_pool();
  out["server"] = {{"device", stack->device()},
                   {"tp_size", stack->tp_size()},
                   {"l1_slots", stack->l1_slots()},
                   {"l1_free_slots", s.l1_free_slots},
                   {"l2_codec", l2 ? l2->codec_spec() : "none"},
                   {"l2_record_align", l2 ? l2->layout(KvPart::kK).record_align : 0},
                   {"l2_capacity_tokens", stack->host_capacity_tokens()},
                   {"l2_bytes_per_token", l2 ? l2->bytes_per_token() : 0},
                   {"l2_reserved_bytes", l2 ? l2->reserved_bytes() : 0},
                   {"l2_used_tokens", s.l2_used_tokens},
                   {"load_back_tokens", s.cache.load_back_tokens},
                   {"load_back_failures", s.cache.load_back_failures},
                   {"backup_tokens", s.cache.backup_tokens},
                   {"backup_skipped_tokens", s.cache.backup_skipped_tokens},
                   {"l1_evicted_to_host_tokens", s.cache.l1_evicted_to_host_tokens},
                   {"l1_dropped_tokens", s.cache.l1_dropped_tokens},
                   {"l2_evicted_tokens", s.cache.l2_evicted_tokens},
                   {"l1_eviction_waits", s.cache.l1_eviction_waits},
                   {"running", s.running},
                   {"waiting", s.waiting},
                   {"finished", s.finished},
                   {"failed", s.failed},
                   {"cancelled", s.cancelled}};
  if (l2 != nullptr && l2->tiered()) {
    nlohmann::json rungs = nlohmann::json::array();
    for (int rung = 0; rung < l2->rungs(); ++rung)
      rungs.push_back({{"codec", l2->codec(rung).name()},
                       {"backup_tokens", s.cache.backup_rung_tokens[rung]},
                       {"demoted_tokens", s.cache.demoted_tokens[rung]},
                       {"load_back_tokens", s.cache.load_back_rung_tokens[rung]}});
    out["server"]["rungs"] = rungs;
    out["server"]["demotion_waits"] = s.cache.demotion_waits;
    out["server"]["demotions_taken_back"] = s.cache.demotions_taken_back;
    out["server"]["fragmented_allocations"] = s.cache.fragmented_allocations;
    out["server"]["fragmentation_dropped_tokens"] = s.cache.fragmentation_dropped_tokens;
    const ServingStack::DemotionReport d = stack->demotion_report();
    out["server"]["demotion"] = {{"device", d.device},
                                 {"jobs", d.stats.jobs},
                                 {"tokens", d.stats.tokens},
                                 {"failed_jobs", d.stats.failed_jobs},
                                 {"seconds", d.stats.seconds},
                                 {"gpu_failed_jobs", d.gpu_failed_jobs}};
  }
  // Seconds are summed from each operation's submission to its completion,
  // so bytes / seconds is the mean rate one operation saw.
  out["transfer"] = {{"load_ops", t.load_ops},
                     {"load_tokens", t.load_tokens},
                     {"load_bytes", t.load_bytes},
                     {"load_seconds", t.load_seconds},
                     {"load_gb_per_s", rate(t.load_bytes, t.load_seconds)},
                     {"backup_ops", t.backup_ops},
                     {"backup_tokens", t.backup_tokens},
                     {"backup_bytes", t.backup_bytes},
                     {"backup_seconds", t.backup_seconds},
                     {"backup_gb_per_s", rate(t.backup_bytes, t.backup_seconds)},
                     {"failed_ops", t.failed_ops}};
  out["scheduler"] = scheduler_json(s.scheduler);
  return out;
}

void print_report(const LoadReport& r) {
  Table t({"requests", "failed", "duration s", "req/s", "out tok/s", "hit rate", "device", "host", "storage"});
  t.add_row({std::to_string(r.requests), std::to_string(r.failed), format_fixed(r.duration_seconds, 2),
             format_fixed(r.request_throughput, 2), format_fixed(r.output_throughput, 1),
             format_fixed(r.hit_rate * 100, 1) + " %", format_fixed(r.hit_rate_device * 100, 1) + " %",
             format_fixed(r.hit_rate_host * 100, 1) + " %", format_fixed(r.hit_rate_storage * 100, 1) + " %"});
  t.print(std::cout);
  std::cout << '\n';
  Table l({"ms", "mean", "p50", "p90", "p99", "max"});
  for (const auto& [name, s] : {std::pair{"TTFT", r.ttft}, std::pair{"ITL", r.itl}, std::pair{"E2E", r.e2e}})
    l.add_row({name, ms(s.mean), ms(s.p50), ms(s.p90), ms(s.p99), ms(s.max)});
  l.print(std::cout);
}

// An HTTP server of our own on a free loopback port, serving `stack` until
// destroyed; points `load` at it.
class LocalServer {
 public:
  static Result<std::unique_ptr<LocalServer>> start(ServingStack& stack, LoadOptions& load) {
    auto s = std::unique_ptr<LocalServer>(new LocalServer());
    HttpOptions http;
    http.host = "127.0.0.1";
    http.port = 0;
    http.threads = std::max(8, load.max_concurrency + 4);
    s->server_ = std::make_unique<HttpServer>(stack, http);
    HIQ_ASSIGN_OR_RETURN(int port, s->server_->bind());
    load.host = "127.0.0.1";
    load.port = port;
    load.api_key.clear();
    s->thread_ = std::thread([server = s->server_.get()] { (void)server->serve(); });
    return s;
  }
  ~LocalServer() {
    server_->stop();
    if (thread_.joinable()) thread_.join();
  }

 private:
  LocalServer() = default;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
};

// Progress on stderr: every request on a terminal, every 32nd otherwise.
std::function<void(size_t, size_t)> progress_printer(std::string prefix) {
  const bool tty = isatty(STDERR_FILENO) != 0;
  return [tty, prefix = std::move(prefix)](size_t done, size_t total) {
    if (tty) {
      std::fprintf(stderr, "\r%s%zu/%zu requests", prefix.c_str(), done, total);
      if (done == total) std::fputc('\n', stderr);
    } else if (done == total || done % 32 == 0) {
      std::fprintf(stderr, "%s%zu/%zu requests\n", prefix.c_str(), done, total);
    }
  };
}

int run_bench_serve(BenchServeFlags f) {
  std::unique_ptr<ServingStack> stack;
  std::unique_ptr<LocalServer> server;
  if (!f.stack.config.model_dir.empty()) {
    auto config = build_stack_config(f.stack);
    if (!config) return report_error("bench serve", config.status());
    auto built = ServingStack::create(*config);
    if (!built) return report_error("bench serve", built.status());
    stack = std::move(*built);
    auto started = LocalServer::start(*stack, f.load);
    if (!started) return report_error("bench serve", started.status());
    server = std::move(*started);
  }

  int vocab = f.vocab_size;
  if (vocab <= 0) {
    auto v = server_vocab_size(f.load);
    if (!v) return report_error("bench serve", v.status());
    vocab = *v;
  }
  auto source = make_request_source(f.workload, vocab);
  if (!source) return report_error("bench serve", source.status());
  auto report = run_load(f.load, **source, progress_printer("hiq bench serve: "));
  if (!report) return report_error("bench serve", report.status());
  const LoadReport& r = *report;
  if (f.json) std::cout << report_json(r, stack.get()).dump(2) << '\n';
  else print_report(r);
  if (r.failed > 0) std::cerr << "hiq bench serve: " << r.failed << " requests failed; the first: " << r.first_error << '\n';
  return r.failed == 0 ? 0 : 1;
}

// The median of `values` and their range, as "median (min–max)".
std::string spread(std::vector<double> values, int digits) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  const double median = n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  std::string out = format_fixed(median, digits);
  if (n > 1) out += " (" + format_fixed(values.front(), digits) + "–" + format_fixed(values.back(), digits) + ")";
  return out;
}

// The stack configuration of `c`: the cache flags with its host tier.
Result<ServeConfig> config_for(const ServeFlags& base, const TierConfig& c) {
  ServeFlags flags = base;
  flags.host.none = !c.hicache;
  flags.host.codec = c.codec;
  flags.host.record_align = c.record_align;
  if (!c.demotion_device.empty()) flags.demotion_device = c.demotion_device;
  auto config = build_stack_config(flags);
  if (!config) return config.status().with_context("--compare " + c.label);
  return config;
}

// A fresh cache and engine of configuration `c` on the loaded `model`.
Result<std::unique_ptr<ServingStack>> stack_for(const ServeFlags& base, const TierConfig& c,
                                                std::shared_ptr<const ServingModel> model) {
  HIQ_ASSIGN_OR_RETURN(ServeConfig config, config_for(base, c));
  auto stack = ServingStack::create(config, std::move(model));
  if (!stack) return stack.status().with_context("--compare " + c.label);
  return stack;
}

// --compare: every configuration × repeat × working set on one loaded model.
int run_bench_compare(BenchServeFlags f) {
  if (f.stack.config.model_dir.empty()) return report_error("bench serve", invalid_argument("--compare needs --model"));
  if (f.repeats < 1) return report_error("bench serve", invalid_argument("--repeats must be at least 1"));
  auto configs = parse_compare(f.compare, f.stack.host.record_align);
  if (!configs) return report_error("bench serve", configs.status());
  std::vector<int> groups;
  if (f.sweep_num_groups.empty()) {
    groups.push_back(f.workload.shared_prefix.num_groups);
  } else {
    auto counts = parse_integer_list_flag(f.sweep_num_groups, "--sweep-num-groups", 1, 1 << 20);
    if (!counts) return report_error("bench serve", counts.status());
    groups.assign(counts->begin(), counts->end());
  }
  auto base = build_stack_config(f.stack);
  if (!base) return report_error("bench serve", base.status());
  for (const TierConfig& c : *configs)  // every flag error before a long model load
    if (auto config = config_for(f.stack, c); !config) return report_error("bench serve", config.status());
  std::fprintf(stderr, "hiq bench serve: loading %s\n", base->model_dir.c_str());
  auto model = ServingModel::load(*base);
  if (!model) return report_error("bench serve", model.status());
  const int vocab = f.vocab_size > 0 ? f.vocab_size : (*model)->vocab_size();

  struct Row {
    int groups = 0;
    std::string label;
    std::vector<double> hit, host_hit, ttft_mean, ttft_p50, ttft_p99, itl_p50, throughput;
    size_t capacity = 0;
  };
  // One unrecorded run of the first configuration on a quarter of the first
  // workload, so that the first measured run does not pay for start-up
  // (library handles, kernel loading, first-touch of memory).
  if (f.warmup) {
    auto built = stack_for(f.stack, (*configs)[0], *model);
    if (!built) return report_error("bench serve", built.status());
    LoadOptions load = f.load;
    auto started = LocalServer::start(**built, load);
    if (!started) return report_error("bench serve", started.status());
    WorkloadFlags workload = f.workload;
    workload.shared_prefix.num_groups = std::max(1, groups[0] / 4);
    auto source = make_request_source(workload, vocab);
    if (!source) return report_error("bench serve", source.status());
    auto report = run_load(load, **source, progress_printer("hiq bench serve: warm-up: "));
    if (!report) return report_error("bench serve", report.status());
  }

  std::vector<Row> rows;
  const size_t total_runs = groups.size() * static_cast<size_t>(f.repeats) * configs->size();
  size_t run = 0;
  bool any_failed = false;
  for (int g : groups) {
    for (const TierConfig& c : *configs) {
      Row row;
      row.groups = g;
      row.label = c.label;
      rows.push_back(std::move(row));
    }
    for (int repeat = 0; repeat < f.repeats; ++repeat) {
      for (size_t i = 0; i < configs->size(); ++i) {
        const size_t index = compare_run_index(static_cast<size_t>(repeat), i, configs->size());
        const TierConfig& c = (*configs)[index];
        auto built = stack_for(f.stack, c, *model);
        if (!built) return report_error("bench serve", built.status());
        std::unique_ptr<ServingStack> stack = std::move(*built);
        LoadOptions load = f.load;
        auto started = LocalServer::start(*stack, load);
        if (!started) return report_error("bench serve", started.status());
        std::unique_ptr<LocalServer> server = std::move(*started);
        WorkloadFlags workload = f.workload;
        workload.shared_prefix.num_groups = g;
        auto source = make_request_source(workload, vocab);
        if (!source) return report_error("bench serve", source.status());
        ++run;
        char prefix[160];
        std::snprintf(prefix, sizeof prefix, "hiq bench serve: run %zu/%zu, %s, %d groups, repeat %d: ", run,
                      total_runs, c.label.c_str(), g, repeat + 1);
        auto report = run_load(load, **source, progress_printer(prefix));
        if (!report) return report_error("bench serve", report.status());
        server.reset();  // every client has its answer: the engine is idle
        nlohmann::json out = report_json(*report, stack.get());
        out["config"] = c.label;
        out["num_groups"] = g;
        out["workload"] = {{"prompts_per_group", f.workload.shared_prefix.prompts_per_group},
                           {"system_prompt_len", f.workload.shared_prefix.system_prompt_len},
                           {"question_len", f.workload.shared_prefix.question_len},
                           {"output_len", f.workload.shared_prefix.output_len},
                           {"max_concurrency", f.load.max_concurrency}};
        out["repeat"] = repeat;
        out["position"] = i;  // where in this repeat's order the configuration ran
        if (f.json) std::cout << out.dump() << std::endl;
        if (report->failed > 0) {
          any_failed = true;
          std::cerr << "hiq bench serve: " << c.label << ": " << report->failed
                    << " requests failed; the first: " << report->first_error << '\n';
        }
        Row& row = rows[rows.size() - configs->size() + index];
        const LoadReport& r = *report;
        row.hit.push_back(r.hit_rate * 100);
        row.host_hit.push_back(r.hit_rate_host * 100);
        row.ttft_mean.push_back(r.ttft.mean * 1e3);
        row.ttft_p50.push_back(r.ttft.p50 * 1e3);
        row.ttft_p99.push_back(r.ttft.p99 * 1e3);
        row.itl_p50.push_back(r.itl.p50 * 1e3);
        row.throughput.push_back(r.output_throughput);
        row.capacity = stack->host_capacity_tokens();
      }
    }
  }
  if (!f.json) {
    std::cout << "median (min–max) over " << f.repeats << " repeat(s)\n";
    Table t({"groups", "L2", "L2 tokens", "hit %", "host hit %", "TTFT mean ms", "TTFT p50 ms", "TTFT p99 ms",
             "ITL p50 ms", "out tok/s"});
    for (const Row& r : rows)
      t.add_row({std::to_string(r.groups), r.label, std::to_string(r.capacity), spread(r.hit, 1),
                 spread(r.host_hit, 1), spread(r.ttft_mean, 0), spread(r.ttft_p50, 0), spread(r.ttft_p99, 0),
                 spread(r.itl_p50, 1), spread(r.throughput, 0)});
    t.print(std::cout);
  }
  return any_failed ? 1 : 0;
}

// The names of the options in `options` that the user typed, as "--a, --b".
std::string typed(const std::vector<const CLI::Option*>& options) {
  std::string names;
  for (const CLI::Option* o : options)
    if (o->count() > 0) names += (names.empty() ? "" : ", ") + o->get_name();
  return names;
}

// Flags of one mode typed in the other are refused, never ignored: the stack
// flags configure the in-process server, which only --model starts; --host,
// --port and --api-key address a running server, and with --model the load
// goes to the in-process one; the --compare flags shape a comparison.
Status check_mode_flags(const BenchServeFlags& f, const std::vector<const CLI::Option*>& stack,
                        const std::vector<const CLI::Option*>& remote, const std::vector<const CLI::Option*>& compare) {
  const bool in_process = !f.stack.config.model_dir.empty();
  if (!in_process) {
    if (const std::string names = typed(stack); !names.empty())
      return invalid_argument(names + ": these configure the in-process server, which only --model starts; a running "
                              "server (--host/--port) keeps its own configuration");
  } else if (const std::string names = typed(remote); !names.empty()) {
    return invalid_argument(names + ": these address a running server; with --model the load goes to the server "
                            "started in-process on a free loopback port");
  }
  if (f.compare.empty())
    if (const std::string names = typed(compare); !names.empty())
      return invalid_argument(names + ": these only apply with --compare");
  return Status::ok();
}

}  // namespace
std::function<int()> add_bench_serve_command(CLI::App& bench) {
  auto f = std::make_shared<BenchServeFlags>();
  f->workload.shared_prefix.num_groups = 8;
  f->workload.shared_prefix.prompts_per_group = 4;
  f->workload.shared_prefix.system_prompt_len = 256;
  f->workload.shared_prefix.question_len = 32;
  f->workload.shared_prefix.output_len = 16;
  CLI::App* app = bench.add_subcommand(
      "serve", "Load generator: the workloads of hiq sim against a server (or one started in-process with --model)");
  // Each mode's flags, to refuse those typed in the other mode.
  const auto options_added = [app](size_t before) {
    const std::vector<const CLI::Option*> all = std::as_const(*app).get_options();
    return std::vector<const CLI::Option*>(all.begin() + static_cast<std::ptrdiff_t>(before), all.end());
  };
  std::vector<const CLI::Option*> remote, stack, compare;
  size_t before = app->get_options().size();
  app->add_option("--host", f->load.host, "Server address (not with --model)")->capture_default_str();
  app->add_option("--port", f->load.port, "Server port (not with --model)")->capture_default_str();
  app->add_option("--api-key", f->load.api_key, "Sent as Authorization: Bearer (not with --model)");
  remote = options_added(before);
  app->add_option("--model", f->stack.config.model_dir,
                  "Start a server in-process on this model directory (the flags below up to --vocab-size need it)");
  before = app->get_options().size();
  add_stack_flags(app, f->stack);
  stack = options_added(before);
  app->add_option("--vocab-size", f->vocab_size, "Token ids are drawn below this (0: ask the server)");
  add_workload_flags(app, f->workload);
  app->add_option("--max-concurrency", f->load.max_concurrency, "Clients at once (closed loop)")->capture_default_str();
  app->add_option("--request-rate", f->load.request_rate, "Request starts per second (Poisson; inf: no pacing)")
      ->capture_default_str();
  app->add_option("--compare", f->compare,
                  "In-process: run once per host tier, e.g. none,bf16,int8,int8/128,fp8,int4,int4h,k=int8,v=int4h "
                  "(codec/align; k=…,v=… is one tier), or tiered:int8,int4h@cpu (a ladder, @ where it demotes)");
  before = app->get_options().size();
  app->add_option("--repeats", f->repeats,
                  "--compare: runs of each configuration; twice the number of configurations puts each one at "
                  "every place in the order twice")
      ->capture_default_str();
  app->add_option("--sweep-num-groups", f->sweep_num_groups,
                  "--compare: repeat everything for each group count, e.g. 1,4,16");
  app->add_flag("!--no-warmup", f->warmup, "--compare: no unrecorded warm-up run first");
  compare = options_added(before);
  app->add_flag("--json", f->json, "Print JSON (--compare: one line per run)");
  return [f, app, remote, stack, compare] {
    if (!app->parsed()) return -1;
    if (Status s = check_mode_flags(*f, stack, remote, compare); !s.is_ok()) return report_error("bench serve", s);
    return f->compare.empty() ? run_bench_serve(*f) : run_bench_compare(*f);
  };
}

}  // namespace hiq::cli
