// `hiq serve --model DIR`: the OpenAI-compatible server (server/http_server.h)
// over the hierarchical cache, on the CPU or the CUDA backend. SIGINT and
// SIGTERM stop it gracefully: new requests get a 503, running and queued ones
// are cancelled and answered (finish_reason "abort"), nothing new is backed
// up to L2, the transfers in flight drain, and the process exits — within
// --shutdown-timeout, after which it exits anyway (status 1).
#include <pthread.h>
#include <signal.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "core/log.h"
#include "core/units.h"
#include "server/http_server.h"
#include "tools/hiq/commands.h"
#include "tools/hiq/serve_flags.h"

namespace hiq::cli {
namespace {

struct ServeOnlyFlags {
  std::string reasoning_parser = "";
  std::string log_level = "info";
  double shutdown_timeout_s = 5.0;
};

int run_serve(ServeFlags& f, const ServeOnlyFlags& o) {
  auto config = build_stack_config(f);
  if (!config) return report_error("serve", config.status());
  // Defaults never exceed the limit a user lowered.
  auto& limits = f.http.limits;
  limits.default_chat_max_tokens = std::min(limits.default_chat_max_tokens, limits.max_max_tokens);
  limits.default_completion_max_tokens = std::min(limits.default_completion_max_tokens, limits.max_max_tokens);
  // Each request in flight holds a connection's thread until it is answered:
  // room for every running request, and for health checks, metrics and idle
  // keep-alive connections beside them.
  if (f.http.threads == 0)
    f.http.threads = static_cast<int>(std::min<size_t>(4096, config->scheduler.max_running_requests + 32));
  const Status http = with_flag_names(f.http.validate(), {{"port", "--port"},
                                                          {"threads", "--threads"},
                                                          {"host", "--host"},
                                                          {"max_body_bytes", "--max-body-bytes"},
                                                          {"max_prompt_tokens", "--max-prompt-tokens"},
                                                          {"max_max_tokens", "--max-tokens-limit"}});
  if (!http.is_ok()) return report_error("serve", http);
  auto reasoning = parse_reasoning_format(o.reasoning_parser);
  if (!reasoning) return report_error("serve", invalid_argument("--reasoning-parser: " + reasoning.status().message()));
  f.http.reasoning = *reasoning;
  auto level = parse_log_level(o.log_level);
  if (!level) return report_error("serve", invalid_argument("--log-level: " + level.status().message()));
  set_log_level(*level);
  if (!(o.shutdown_timeout_s > 0 && o.shutdown_timeout_s <= 3600))
    return report_error("serve", invalid_argument("--shutdown-timeout must be in (0, 3600] seconds"));
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
               "hiq serve: listening on http://%s:%d (%d connections at once) — model %s, %s%s, context %zu tokens, "
               "L1 %zu tokens, L2 %zu tokens (%s), %s\n",
               f.http.host.c_str(), *port, f.http.threads, (*stack)->model_name().c_str(), config->device.c_str(),
               config->tp_size > 1 ? (", tp " + std::to_string(config->tp_size)).c_str() : "",
               (*stack)->context_tokens(), (*stack)->l1_slots(), (*stack)->host_capacity_tokens(),
               config->hicache ? f.host.codec.c_str() : "no host tier",
               (*stack)->tokenizer() != nullptr ? "text and token-id prompts" : "token-id mode (no tokenizer.json)");
  std::fflush(stderr);
  std::thread waiter([&] {
    int signal = 0;
    sigwait(&signals, &signal);
    std::fprintf(stderr, "hiq serve: %s, shutting down\n", signal == SIGTERM ? "SIGTERM" : "SIGINT");
    std::fflush(stderr);
    // A watchdog: whatever hangs, the process is gone within the grace period.
    std::thread([timeout = o.shutdown_timeout_s] {
      std::this_thread::sleep_for(std::chrono::duration<double>(timeout));
      log(LogLevel::kError, "serve", "did not stop within --shutdown-timeout; exiting");
      ::_exit(1);
    }).detach();
    // The engine first: new submissions get a 503, running and queued
    // requests are cancelled and answered, nothing new is backed up. Then the
    // HTTP server, whose handlers now return at once.
    (*stack)->engine().stop();
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
  f->http.threads = 0;
  app->add_option("--threads", f->http.threads, "Connections served at once (0: --max-running-requests + 32)")
      ->capture_default_str();
  auto o = std::make_shared<ServeOnlyFlags>();
  app->add_option("--log-level", o->log_level, "debug, info, warning, error or off")->capture_default_str();
  app->add_option("--shutdown-timeout", o->shutdown_timeout_s,
                  "Seconds SIGTERM/SIGINT may take to cancel, answer and exit before the process exits anyway")
      ->capture_default_str();
  app->add_option("--reasoning-parser", o->reasoning_parser,
                  "Split chat output's thinking into reasoning_content: qwen3 or deepseek-r1");
  return {app, [f, o] { return run_serve(*f, *o); }};
}

}  // namespace hiq::cli
