// `hiq serve` in a build without cpp-httplib: a clear error instead of the server.
#include "tools/hiq/commands.h"

namespace hiq::cli {

Subcommand add_serve_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand("serve", "OpenAI-compatible server (not in this build: needs cpp-httplib)");
  app->allow_extras();
  return {app, [] {
            return report_error("serve", unavailable("this build has no HTTP server: install libcpp-httplib-dev "
                                                     "(scripts/bootstrap) and rebuild"));
          }};
}

std::function<int()> add_bench_serve_command(CLI::App& bench) {
  CLI::App* app = bench.add_subcommand("serve", "Load generator (not in this build: needs cpp-httplib)");
  app->allow_extras();
  return [app] {
    if (!app->parsed()) return -1;
    return report_error("bench serve", unavailable("this build has no HTTP client: install libcpp-httplib-dev "
                                                   "(scripts/bootstrap) and rebuild"));
  };
}

}  // namespace hiq::cli
