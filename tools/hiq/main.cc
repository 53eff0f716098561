// hiq — the one command-line tool of HiQCache.
#include <cstdio>
#include <exception>
#include <vector>

#include "tools/hiq/commands.h"

namespace hiq::cli {
int report_error(const std::string& command, const Status& status) {
  std::fprintf(stderr, "hiq %s: error: %s\n", command.c_str(), status.message().c_str());
  return 1;
}
}  // namespace hiq::cli

int main(int argc, char** argv) {
  CLI::App app{"HiQCache: a hierarchical KV cache whose host tier stores KV compressed"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "hiq 0.1.0");
  const std::vector<hiq::cli::Subcommand> commands = {
      hiq::cli::add_layout_command(app),
      hiq::cli::add_devices_command(app),
      hiq::cli::add_sim_command(app),
      hiq::cli::add_bench_command(app),
      hiq::cli::add_generate_command(app),
      hiq::cli::add_serve_command(app),
      hiq::cli::add_quality_command(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (const auto& command : commands)
      if (command.app->parsed()) return command.run();
  } catch (const std::exception& e) {  // a bug, but the user still gets a message, not an abort
    std::fprintf(stderr, "hiq: error: %s\n", e.what());
    return 1;
  }
  return 2;
}
