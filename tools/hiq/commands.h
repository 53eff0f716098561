// tools/hiq/commands.h — the subcommands of `hiq`. Each adds itself (with its
// flags) to the CLI11 app and returns the function that runs it once parsed.
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "core/status.h"

namespace hiq::cli {

struct Subcommand {
  CLI::App* app = nullptr;
  std::function<int()> run;  // returns the process exit code
};

Subcommand add_layout_command(CLI::App& parent);
Subcommand add_devices_command(CLI::App& parent);
Subcommand add_sim_command(CLI::App& parent);
Subcommand add_bench_command(CLI::App& parent);
// `hiq bench model`, added under `bench`; the returned function runs it when parsed.
std::function<int()> add_bench_model_command(CLI::App& bench);
// `hiq bench attention`, likewise.
std::function<int()> add_bench_attention_command(CLI::App& bench);
std::function<int()> add_bench_gemm_command(CLI::App& bench);
// `hiq bench cpu`, likewise.
std::function<int()> add_bench_cpu_command(CLI::App& bench);
// `hiq bench demotion`, likewise.
std::function<int()> add_bench_demotion_command(CLI::App& bench);
// `hiq bench storage`, likewise.
std::function<int()> add_bench_storage_command(CLI::App& bench);
// `hiq bench serve`, likewise (a stub without cpp-httplib).
std::function<int()> add_bench_serve_command(CLI::App& bench);
Subcommand add_generate_command(CLI::App& parent);
Subcommand add_serve_command(CLI::App& parent);
Subcommand add_quality_command(CLI::App& parent);

// Prints "hiq <command>: error: <message>" to stderr and returns exit code 1.
int report_error(const std::string& command, const Status& status);

}  // namespace hiq::cli
