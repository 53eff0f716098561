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
#include "tools/hiq/serve_flags.h"

namespace hiq::cli {
namespace {

int run_serve(ServeFlags& f) {
  auto config = build_stack_config(f);
  if (!config) return report_error("serve", config.status());
  if (Status limits = f.http.limits.validate(); !limits.is_ok()) return report_error("serve", limits);
  auto reasoning = parse_reasoning_format(f.reasoning_parser);
  if (!reasoning) return report_error("serve", invalid_argument("--reasoning-parser: " + reasoning.status().message()));
  f.http.reasoning = *reasoning;
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
               config->hicache ? f.host.codec.c_str() : "no host tier",
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
  add_stack_flags(app, *f);
  app->add_option("--host", f->http.host, "Address to listen on")->capture_default_str();
  app->add_option("--port", f->http.port, "Port (0: any free port)")->capture_default_str();
  app->add_option("--api-key", f->http.api_key, "Require Authorization: Bearer <key>");
  app->add_option("--max-prompt-tokens", f->http.limits.max_prompt_tokens, "Longest prompt accepted")
      ->capture_default_str();
  app->add_option("--max-tokens-limit", f->http.limits.max_max_tokens, "Largest max_tokens accepted")
      ->capture_default_str();
  app->add_option("--max-body-bytes", f->http.limits.max_body_bytes, "Largest request body accepted")
      ->capture_default_str();
  app->add_option("--threads", f->http.threads, "Connections served at once")->capture_default_str();
  app->add_option("--reasoning-parser", f->reasoning_parser,
                  "Split chat output's thinking into reasoning_content: qwen3 or deepseek-r1");
  return {app, [f] { return run_serve(*f); }};
}

}  // namespace hiq::cli
