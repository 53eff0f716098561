// `hiq bench serve`: the load generator (server/load_generator.h) against a
// running server, or against one it starts in-process with --model DIR and
// the cache flags of `hiq serve`. Takes the workload flags of `hiq sim`, so a
// simulated and a real run can be compared line by line.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "server/load_generator.h"
#include "tools/hiq/commands.h"
#include "tools/hiq/serve_flags.h"
#include "tools/hiq/table.h"

namespace hiq::cli {
namespace {

struct BenchServeFlags {
  ServeFlags stack;  // in-process mode: --model and the cache flags
  LoadOptions load;
  std::string dataset = "generated-shared-prefix";
  SharedPrefixWorkload workload;
  MultiTurnWorkload multi_turn;
  int vocab_size = 0;  // 0: from the server's /v1/models
  bool json = false;
};

Result<std::unique_ptr<RequestSource>> make_source(const BenchServeFlags& f, int vocab) {
  if (f.dataset == "generated-shared-prefix") {
    SharedPrefixWorkload w = f.workload;
    w.vocab_size = vocab;
    HIQ_ASSIGN_OR_RETURN(std::vector<Request> requests, w.generate());
    return make_list_source(std::move(requests));
  }
  if (f.dataset == "multi-turn") {
    MultiTurnWorkload w = f.multi_turn;
    w.seed = f.workload.seed;
    w.vocab_size = vocab;
    return make_multi_turn_source(w);
  }
  return invalid_argument("--dataset-name '" + f.dataset + "' is not one of generated-shared-prefix, multi-turn");
}

std::string ms(double s) { return format_fixed(s * 1e3, 1); }

int run_bench_serve(BenchServeFlags f) {
  // In-process: a server of our own on a free loopback port.
  std::unique_ptr<ServingStack> stack;
  std::unique_ptr<HttpServer> server;
  std::thread serving;
  if (!f.stack.config.model_dir.empty()) {
    auto config = build_stack_config(f.stack);
    if (!config) return report_error("bench serve", config.status());
    auto built = ServingStack::create(*config);
    if (!built) return report_error("bench serve", built.status());
    stack = std::move(*built);
    HttpOptions http;
    http.host = "127.0.0.1";
    http.port = 0;
    http.threads = std::max(8, f.load.max_concurrency + 4);
    server = std::make_unique<HttpServer>(*stack, http);
    auto port = server->bind();
    if (!port) return report_error("bench serve", port.status());
    f.load.host = "127.0.0.1";
    f.load.port = *port;
    f.load.api_key.clear();
    serving = std::thread([&] { (void)server->serve(); });
  }
  const auto stop_server = [&] {
    if (server) server->stop();
    if (serving.joinable()) serving.join();
  };

  int vocab = f.vocab_size;
  if (vocab <= 0) {
    auto v = server_vocab_size(f.load);
    if (!v) {
      stop_server();
      return report_error("bench serve", v.status());
    }
    vocab = *v;
  }
  auto source = make_source(f, vocab);
  if (!source) {
    stop_server();
    return report_error("bench serve", source.status());
  }
  const bool tty = isatty(STDERR_FILENO) != 0;
  auto report = run_load(f.load, **source, [&](size_t done, size_t total) {
    if (tty) {
      std::fprintf(stderr, "\rhiq bench serve: %zu/%zu requests", done, total);
      if (done == total) std::fputc('\n', stderr);
    } else if (done == total || done % 32 == 0) {
      std::fprintf(stderr, "hiq bench serve: %zu/%zu requests\n", done, total);
    }
  });
  std::string metrics = server ? server->metrics_text() : std::string();
  stop_server();
  if (!report) return report_error("bench serve", report.status());
  const LoadReport& r = *report;
  const auto latency = [](const LatencySummary& s) {
    return nlohmann::json{{"mean", s.mean}, {"p50", s.p50}, {"p90", s.p90}, {"p99", s.p99}, {"max", s.max}};
  };
  if (f.json) {
    nlohmann::json out = {{"requests", r.requests},
                          {"failed", r.failed},
                          {"first_error", r.first_error},
                          {"duration_s", r.duration_seconds},
                          {"prompt_tokens", r.prompt_tokens},
                          {"completion_tokens", r.completion_tokens},
                          {"cached_device_tokens", r.cached_device_tokens},
                          {"cached_host_tokens", r.cached_host_tokens},
                          {"hit_rate", r.hit_rate},
                          {"hit_rate_device", r.hit_rate_device},
                          {"hit_rate_host", r.hit_rate_host},
                          {"request_throughput", r.request_throughput},
                          {"output_throughput", r.output_throughput},
                          {"ttft_s", latency(r.ttft)},
                          {"itl_s", latency(r.itl)},
                          {"e2e_s", latency(r.e2e)}};
    if (stack) {
      const ServingStats s = stack->engine().stats();
      out["server"] = {{"device", stack->device()},
                       {"l1_slots", stack->context_tokens()},
                       {"l1_free_slots", s.l1_free_slots},
                       {"l2_capacity_tokens", stack->host_capacity_tokens()},
                       {"l2_used_tokens", s.l2_used_tokens},
                       {"load_back_tokens", s.cache.load_back_tokens},
                       {"backup_tokens", s.cache.backup_tokens},
                       {"running", s.running},
                       {"waiting", s.waiting}};
    }
    std::cout << out.dump(2) << '\n';
    return r.failed == 0 ? 0 : 1;
  }
  Table t({"requests", "failed", "duration s", "req/s", "out tok/s", "hit rate", "device", "host"});
  t.add_row({std::to_string(r.requests), std::to_string(r.failed), format_fixed(r.duration_seconds, 2),
             format_fixed(r.request_throughput, 2), format_fixed(r.output_throughput, 1),
             format_fixed(r.hit_rate * 100, 1) + " %", format_fixed(r.hit_rate_device * 100, 1) + " %",
             format_fixed(r.hit_rate_host * 100, 1) + " %"});
  t.print(std::cout);
  std::cout << '\n';
  Table l({"ms", "mean", "p50", "p90", "p99", "max"});
  for (const auto& [name, s] : {std::pair{"TTFT", r.ttft}, std::pair{"ITL", r.itl}, std::pair{"E2E", r.e2e}})
    l.add_row({name, ms(s.mean), ms(s.p50), ms(s.p90), ms(s.p99), ms(s.max)});
  l.print(std::cout);
  if (r.failed > 0) std::cerr << "hiq bench serve: " << r.failed << " requests failed; the first: " << r.first_error << '\n';
  return r.failed == 0 ? 0 : 1;
}

}  // namespace

std::function<int()> add_bench_serve_command(CLI::App& bench) {
  auto f = std::make_shared<BenchServeFlags>();
  f->workload.num_groups = 8;
  f->workload.prompts_per_group = 4;
  f->workload.system_prompt_len = 256;
  f->workload.question_len = 32;
  f->workload.output_len = 16;
  CLI::App* app = bench.add_subcommand(
      "serve", "Load generator: the workloads of hiq sim against a server (or one started in-process with --model)");
  app->add_option("--host", f->load.host, "Server address")->capture_default_str();
  app->add_option("--port", f->load.port, "Server port")->capture_default_str();
  app->add_option("--api-key", f->load.api_key, "Sent as Authorization: Bearer");
  app->add_option("--model", f->stack.config.model_dir, "Start a server in-process on this model directory");
  add_stack_flags(app, f->stack);
  app->add_option("--vocab-size", f->vocab_size, "Token ids are drawn below this (0: ask the server)");
  app->add_option("--dataset-name", f->dataset, "generated-shared-prefix or multi-turn")->capture_default_str();
  app->add_option("--gsp-num-groups", f->workload.num_groups, "Shared-prefix groups")->capture_default_str();
  app->add_option("--gsp-prompts-per-group", f->workload.prompts_per_group, "Prompts per group")->capture_default_str();
  app->add_option("--gsp-system-prompt-len", f->workload.system_prompt_len, "Shared prefix tokens")->capture_default_str();
  app->add_option("--gsp-question-len", f->workload.question_len, "Per-prompt tokens after the prefix")
      ->capture_default_str();
  app->add_option("--gsp-output-len", f->workload.output_len, "Tokens generated per request")->capture_default_str();
  app->add_option("--num-clients", f->multi_turn.num_clients, "multi-turn: conversations")->capture_default_str();
  app->add_option("--num-rounds", f->multi_turn.num_rounds, "multi-turn: rounds per conversation")->capture_default_str();
  app->add_option("--request-length", f->multi_turn.request_length, "multi-turn: new tokens per round")
      ->capture_default_str();
  app->add_option("--output-length", f->multi_turn.output_length, "multi-turn: tokens generated per round")
      ->capture_default_str();
  app->add_option("--seed", f->workload.seed, "Seed of the workload")->capture_default_str();
  app->add_option("--max-concurrency", f->load.max_concurrency, "Clients at once (closed loop)")->capture_default_str();
  app->add_option("--request-rate", f->load.request_rate, "Request starts per second (Poisson; inf: no pacing)")
      ->capture_default_str();
  app->add_flag("--json", f->json, "Print JSON");
  return [f, app] { return app->parsed() ? run_bench_serve(*f) : -1; };
}

}  // namespace hiq::cli
