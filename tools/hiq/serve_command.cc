// `hiq serve --model DIR`: the OpenAI-compatible server (server/http_server.h)
// over the hierarchical cache, on the CPU or the CUDA backend. SIGINT and
// SIGTERM stop it gracefully: no new connections, running requests are
// cancelled and answered, the cache's transfers drain.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <thread>

#include "core/units.h"
#include "server/http_server.h"
#include "tools/hiq/commands.h"

namespace hiq::cli {
namespace {

struct ServeFlags {
  ServeConfig config;
  HttpOptions http;
  int64_t max_total_tokens = 0;
  std::string hicache_size = "0";
  double hicache_ratio = 2.0;
  std::string write_policy = "write_through";
  std::string codec = "int8";
  int64_t record_align = static_cast<int64_t>(kDefaultRecordAlign);
  bool no_hicache = false;
  int64_t max_prefill_tokens = 16384;
  int64_t max_running_requests = 256;
};

Result<ServeConfig> build_config(const ServeFlags& f) {
  ServeConfig c = f.config;
  if (f.max_total_tokens < 0) return invalid_argument("--max-total-tokens must not be negative");
  c.max_total_tokens = static_cast<size_t>(f.max_total_tokens);
  if (c.page_size < 1) return invalid_argument("--page-size must be positive");
  c.hicache = !f.no_hicache;
  HIQ_ASSIGN_OR_RETURN(c.host.codec, parse_codec(f.codec));
  if (f.record_align <= 0 || f.record_align > static_cast<int64_t>(kMaxRecordAlign))
    return invalid_argument("--record-align must be a power of two from 1 to " + std::to_string(kMaxRecordAlign));
  c.host.record_align = static_cast<size_t>(f.record_align);
  auto size = parse_byte_size(f.hicache_size, kGB);
  if (!size) return size.status().with_context("--hicache-size");
  c.host.size_bytes = *size;
  if (*size == 0) {
    if (!(f.hicache_ratio > 0)) return invalid_argument("--hicache-ratio must be positive");
    c.host.ratio = f.hicache_ratio;
  }
  HIQ_ASSIGN_OR_RETURN(c.cache.write_policy, parse_write_policy(f.write_policy));
  if (f.max_prefill_tokens <= 0) return invalid_argument("--max-prefill-tokens must be positive");
  c.scheduler.max_prefill_tokens = static_cast<size_t>(f.max_prefill_tokens);
  if (f.max_running_requests <= 0) return invalid_argument("--max-running-requests must be positive");
  c.scheduler.max_running_requests = static_cast<size_t>(f.max_running_requests);
  return c;
}

int run_serve(const ServeFlags& f) {
  auto config = build_config(f);
  if (!config) return report_error("serve", config.status());
  HIQ_CHECK(f.http.limits.validate().is_ok());
  // SIGINT and SIGTERM go to one waiting thread (blocked everywhere else,
  // including the threads the stack and the server start).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  std::fprintf(stderr, "hiq serve: loading %s on %s\n", config->model_dir.c_str(), config->device.c_str());
  auto stack = ServingStack::create(*config);
  if (!stack) return report_error("serve", stack.status());
  HttpServer server(**stack, f.http);
  auto port = server.bind();
  if (!port) return report_error("serve", port.status());
  std::fprintf(stderr,
               "hiq serve: listening on http://%s:%d — model %s, %s, L1 %zu tokens, L2 %zu tokens (%s), %s\n",
               f.http.host.c_str(), *port, (*stack)->model_name().c_str(), config->device.c_str(),
               (*stack)->context_tokens(), (*stack)->host_capacity_tokens(),
               config->hicache ? f.codec.c_str() : "no host tier",
               (*stack)->tokenizer() != nullptr ? "text and token-id prompts" : "token-id mode (no tokenizer.json)");
  std::fflush(stderr);
  std::thread waiter([&] {
    int signal = 0;
    sigwait(&signals, &signal);
    std::fprintf(stderr, "hiq serve: %s, shutting down\n", signal == SIGTERM ? "SIGTERM" : "SIGINT");
    server.stop();
  });
  const Status served = server.serve();
  if (waiter.joinable()) {
    pthread_kill(waiter.native_handle(), SIGTERM);  // wakes the waiter if serve() ended on its own
    waiter.join();
  }
  stack->reset();
  if (!served.is_ok()) return report_error("serve", served);
  std::fprintf(stderr, "hiq serve: stopped\n");
  return 0;
}

}  // namespace

Subcommand add_serve_command(CLI::App& parent) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* app = parent.add_subcommand("serve", "OpenAI-compatible server over the hierarchical KV cache");
  app->add_option("--model", f->config.model_dir, "Model directory (config.json, *.safetensors, tokenizer.json)")
      ->required();
  app->add_option("--device", f->config.device, "cpu or cuda")->capture_default_str();
  app->add_option("--host", f->http.host, "Address to listen on")->capture_default_str();
  app->add_option("--port", f->http.port, "Port (0: any free port)")->capture_default_str();
  app->add_option("--api-key", f->http.api_key, "Require Authorization: Bearer <key>");
  app->add_option("--served-model-name", f->config.served_model_name, "Model name in the API (default: the directory)");
  app->add_option("--max-total-tokens", f->max_total_tokens, "L1 capacity in tokens (0: 8192 cpu, 65536 cuda)")
      ->capture_default_str();
  app->add_option("--page-size", f->config.page_size, "Tokens per page")->capture_default_str();
  app->add_option("--hicache-size", f->hicache_size, "Host (L2) budget: 8GB, 8GiB; 0 uses --hicache-ratio")
      ->capture_default_str();
  app->add_option("--hicache-ratio", f->hicache_ratio, "L2 tokens per L1 token, when --hicache-size is 0")
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
  app->add_option("--max-prompt-tokens", f->http.limits.max_prompt_tokens, "Longest prompt accepted")
      ->capture_default_str();
  app->add_option("--max-tokens-limit", f->http.limits.max_max_tokens, "Largest max_tokens accepted")
      ->capture_default_str();
  app->add_option("--max-body-bytes", f->http.limits.max_body_bytes, "Largest request body accepted")
      ->capture_default_str();
  app->add_option("--threads", f->http.threads, "Connections served at once")->capture_default_str();
  return {app, [f] { return run_serve(*f); }};
}

}  // namespace hiq::cli
