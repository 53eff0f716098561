// `hiq bench attention`: the CUDA attention kernels alone at a model's head
// geometry (model/attention_bench.h): time and TFLOP/s per kernel, the Hopper
// kernel as a ratio of the portable one, and how far its output is from it.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "model/attention_bench.h"
#include "tools/hiq/commands.h"
#include "tools/hiq/list_flag.h"
#include "tools/hiq/table.h"

namespace hiq::cli {
namespace {

struct AttentionBenchFlags {
  std::string tokens = "2048,8192,16384";
  int prefix = 0;
  int heads = 32, kv_heads = 8, head_dim = 128;
  double seconds = 0.5;
  bool json = false;
};

int run_attention_bench_command(const AttentionBenchFlags& f) {
  AttentionBenchOptions o;
  auto tokens = parse_integer_list_flag(f.tokens, "--tokens", 1, 1 << 20);
  if (!tokens) return report_error("bench attention", tokens.status());
  o.tokens.assign(tokens->begin(), tokens->end());
  if (f.prefix < 0) return report_error("bench attention", invalid_argument("--prefix cannot be negative"));
  if (!(f.seconds > 0)) return report_error("bench attention", invalid_argument("--seconds must be positive"));
  o.prefix = f.prefix;
  o.heads = f.heads;
  o.kv_heads = f.kv_heads;
  o.head_dim = f.head_dim;
  o.seconds_per_measurement = f.seconds;
  const bool tty = isatty(STDERR_FILENO) != 0;
  auto report = run_attention_bench(o, [&](size_t done, size_t total) {
    std::fprintf(stderr, tty ? "\rhiq bench attention: %zu/%zu" : "hiq bench attention: %zu/%zu\n", done, total);
    if (tty && done == total) std::fputc('\n', stderr);
  });
  if (!report) return report_error("bench attention", report.status());

  if (f.json) {
    nlohmann::json out = {{"gpu", report->gpu}, {"heads", f.heads}, {"kv_heads", f.kv_heads}, {"head_dim", f.head_dim}};
    for (const auto& row : report->rows) {
      nlohmann::json j = {{"tokens", row.tokens}, {"prefix", row.prefix}, {"flops", row.flops}};
      for (const auto& k : row.kernels)
        j["kernels"].push_back({{"kernel", k.name}, {"seconds", k.seconds}, {"tflops", row.flops / k.seconds / 1e12},
                                {"relative_error_vs_portable", k.relative_error}});
      out["rows"].push_back(j);
    }
    std::cout << out.dump(2) << '\n';
    return 0;
  }
  std::cout << report->gpu << ": causal attention, " << f.heads << " query / " << f.kv_heads << " KV heads of "
            << f.head_dim << "\n\n";
  Table table({"tokens", "prefix", "kernel", "ms", "TFLOP/s", "÷ portable", "rel. diff vs portable"});
  for (const auto& row : report->rows) {
    const double portable = row.kernels.empty() ? 0 : row.kernels.front().seconds;
    for (const auto& k : row.kernels)
      table.add_row({std::to_string(row.tokens), std::to_string(row.prefix), k.name, format_fixed(k.seconds * 1e3, 3),
                     format_fixed(row.flops / k.seconds / 1e12, 0), format_fixed(k.seconds / portable, 2),
                     format_fixed(k.relative_error * 100, 3) + " %"});
  }
  table.print(std::cout);
  return 0;
}

}  // namespace

std::function<int()> add_bench_attention_command(CLI::App& bench) {
  auto f = std::make_shared<AttentionBenchFlags>();
  CLI::App* app = bench.add_subcommand("attention", "CUDA attention kernels alone: time and TFLOP/s per kernel");
  app->add_option("--tokens", f->tokens, "Comma-separated new tokens per prompt")->capture_default_str();
  app->add_option("--prefix", f->prefix, "Cached context tokens before them")->capture_default_str();
  app->add_option("--heads", f->heads, "Query heads")->capture_default_str();
  app->add_option("--kv-heads", f->kv_heads, "KV heads")->capture_default_str();
  app->add_option("--head-dim", f->head_dim, "Head dim")->capture_default_str();
  app->add_option("--seconds", f->seconds, "Repeat each measurement about this long")->capture_default_str();
  app->add_flag("--json", f->json, "Print JSON");
  return [f, app] { return app->parsed() ? run_attention_bench_command(*f) : -1; };
}

}  // namespace hiq::cli
