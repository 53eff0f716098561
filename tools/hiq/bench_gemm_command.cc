// `hiq bench gemm`: a decode step's matrix products on cuBLASLt and on the
// skinny kernel, same run (model/gemm_bench.h): the rate each streams the
// weights at, as a share of a device-to-device copy's, and the ratio.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "model/gemm_bench.h"
#include "tools/hiq/commands.h"
#include "tools/hiq/list_flag.h"
#include "tools/hiq/table.h"

namespace hiq::cli {
namespace {

struct GemmBenchFlags {
  std::string rows = "1,8,16,32";
  std::string prefill;
  GemmBenchOptions options;
  bool json = false;
};

// "hiq bench gemm: done/total" on stderr, in place on a terminal.
std::function<void(size_t, size_t)> progress_on_stderr() {
  return [tty = isatty(STDERR_FILENO) != 0](size_t done, size_t total) {
    std::fprintf(stderr, tty ? "\rhiq bench gemm: %zu/%zu" : "hiq bench gemm: %zu/%zu\n", done, total);
    if (tty && done == total) std::fputc('\n', stderr);
  };
}

// --prefill: a prefill layer's products on cuBLAS and on the Hopper kernel,
// alone and with the step after each (model/gemm_bench.h).
int run_prefill_gemm_bench_command(GemmBenchFlags& f) {
  auto rows = parse_integer_list_flag(f.prefill, "--prefill", 1, 65536);
  if (!rows) return report_error("bench gemm", rows.status());
  f.options.prefill_rows.assign(rows->begin(), rows->end());
  if (!(f.options.seconds_per_measurement > 0))
    return report_error("bench gemm", invalid_argument("--seconds must be positive"));
  auto report = run_prefill_gemm_bench(f.options, progress_on_stderr());
  if (!report) return report_error("bench gemm", report.status());
  const auto tflops = [](const PrefillGemmBenchReport::Row& r, double seconds) {
    return 2.0 * r.rows * r.n * static_cast<double>(r.k) / seconds / 1e12;
  };
  if (f.json) {
    nlohmann::json out = {{"gpu", report->gpu}, {"prefill", nlohmann::json::array()}};
    for (const auto& r : report->rows) {
      nlohmann::json row = {{"rows", r.rows},
                            {"step", r.step},
                            {"n", r.n},
                            {"k", r.k},
                            {"cublas_seconds", r.cublas_seconds},
                            {"sm90_seconds", r.sm90_seconds},
                            {"sm90_over_cublas_time", r.sm90_seconds / r.cublas_seconds},
                            {"max_abs_difference", r.max_abs_difference}};
      if (r.cublas_step_seconds > 0) {
        row["cublas_step_seconds"] = r.cublas_step_seconds;
        row["sm90_step_seconds"] = r.sm90_step_seconds;
        row["sm90_over_cublas_step_time"] = r.sm90_step_seconds / r.cublas_step_seconds;
      }
      out["prefill"].push_back(std::move(row));
    }
    std::cout << out.dump(2) << '\n';
    return 0;
  }
  std::cout << report->gpu << ": a prefill layer's products on cuBLAS and on our Hopper kernel; with the step after "
               "each: cuBLAS then the separate kernels, against ours with the step in its epilogue (then the norm)\n\n";
  Table table({"rows", "step", "n × k", "cuBLAS µs", "TFLOP/s", "ours µs", "TFLOP/s", "ours ÷ cuBLAS",
               "with step: cuBLAS µs", "ours µs", "ours ÷ cuBLAS", "max |diff|"});
  for (const auto& r : report->rows) {
    const bool step = r.cublas_step_seconds > 0;
    table.add_row({std::to_string(r.rows), r.step, std::to_string(r.n) + " × " + std::to_string(r.k),
                   format_fixed(r.cublas_seconds * 1e6, 1), format_fixed(tflops(r, r.cublas_seconds), 0),
                   format_fixed(r.sm90_seconds * 1e6, 1), format_fixed(tflops(r, r.sm90_seconds), 0),
                   format_fixed(r.sm90_seconds / r.cublas_seconds, 3),
                   step ? format_fixed(r.cublas_step_seconds * 1e6, 1) : "—",
                   step ? format_fixed(r.sm90_step_seconds * 1e6, 1) : "—",
                   step ? format_fixed(r.sm90_step_seconds / r.cublas_step_seconds, 3) : "—",
                   format_fixed(r.max_abs_difference, 4)});
  }
  table.print(std::cout);
  return 0;
}

int run_gemm_bench_command(GemmBenchFlags& f) {
  if (!f.prefill.empty()) return run_prefill_gemm_bench_command(f);
  auto rows = parse_integer_list_flag(f.rows, "--rows", 1, 4096);
  if (!rows) return report_error("bench gemm", rows.status());
  f.options.rows.assign(rows->begin(), rows->end());
  if (!(f.options.seconds_per_measurement > 0))
    return report_error("bench gemm", invalid_argument("--seconds must be positive"));
  auto report = run_gemm_bench(f.options, progress_on_stderr());
  if (!report) return report_error("bench gemm", report.status());

  // The rate a product streams its weights at (BF16, read once).
  const auto weight_rate = [](const GemmBenchReport::Row& r, double seconds) {
    return 2.0 * r.n * static_cast<double>(r.k) / seconds;
  };
  if (f.json) {
    nlohmann::json out = {{"gpu", report->gpu}, {"copy_bytes_per_s", report->copy_bytes_per_s}};
    for (const auto& r : report->products)
      out["products"].push_back({{"rows", r.rows},
                                 {"product", r.product},
                                 {"n", r.n},
                                 {"k", r.k},
                                 {"cublas_seconds", r.cublas_seconds},
                                 {"skinny_seconds", r.skinny_seconds},
                                 {"cublas_weight_bytes_per_s", weight_rate(r, r.cublas_seconds)},
                                 {"skinny_weight_bytes_per_s", weight_rate(r, r.skinny_seconds)},
                                 {"skinny_over_cublas_time", r.skinny_seconds / r.cublas_seconds},
                                 {"max_abs_difference", r.max_abs_difference}});
    for (size_t i = 0; i < report->products.size(); ++i)
      for (const auto& a : report->products[i].algorithms)
        out["products"][i]["algorithms"].push_back({{"name", a.name},
                                                    {"workspace_bytes", a.workspace_bytes},
                                                    {"seconds", a.seconds},
                                                    {"same_bits", a.same_bits},
                                                    {"max_abs_difference", a.max_abs_difference}});
    std::cout << out.dump(2) << '\n';
    return 0;
  }
  std::cout << report->gpu << ": decode products, weights from device memory; a device-to-device copy moves "
            << format_fixed(report->copy_bytes_per_s / 1e12, 2) << " TB/s (read plus written)\n\n";
  Table table(
      {"rows", "product", "n × k", "cuBLAS µs", "TB/s", "skinny µs", "TB/s", "skinny ÷ cuBLAS time", "max |diff|"});
  for (const auto& r : report->products)
    table.add_row({std::to_string(r.rows), r.product, std::to_string(r.n) + " × " + std::to_string(r.k),
                   format_fixed(r.cublas_seconds * 1e6, 1), format_fixed(weight_rate(r, r.cublas_seconds) / 1e12, 2),
                   format_fixed(r.skinny_seconds * 1e6, 1), format_fixed(weight_rate(r, r.skinny_seconds) / 1e12, 2),
                   format_fixed(r.skinny_seconds / r.cublas_seconds, 2), format_fixed(r.max_abs_difference, 4)});
  table.print(std::cout);
  if (f.options.algorithms > 0) {
    // TFLOP/s, and time against the heuristic's first choice (what the model runs).
    std::cout << "\ncuBLASLt's algorithms for each product: first the one a cuBLASLt product of the model runs (rows "
                 "the skinny kernel takes run that instead), then the heuristic's next-ranked\n\n";
    Table algorithms({"rows", "product", "rank", "algorithm", "µs", "TFLOP/s", "÷ first", "same bits", "max |diff|"});
    for (const auto& r : report->products)
      for (size_t i = 0; i < r.algorithms.size(); ++i) {
        const auto& a = r.algorithms[i];
        algorithms.add_row({std::to_string(r.rows), r.product, std::to_string(i + 1), a.name,
                            format_fixed(a.seconds * 1e6, 1),
                            format_fixed(2.0 * r.rows * r.n * static_cast<double>(r.k) / a.seconds / 1e12, 0),
                            format_fixed(a.seconds / r.algorithms.front().seconds, 3), a.same_bits ? "yes" : "no",
                            format_fixed(a.max_abs_difference, 4)});
      }
    algorithms.print(std::cout);
  }
  return 0;
}

}  // namespace

std::function<int()> add_bench_gemm_command(CLI::App& bench) {
  auto f = std::make_shared<GemmBenchFlags>();
  CLI::App* app = bench.add_subcommand(
      "gemm", "A decode step's matrix products on cuBLASLt and on the skinny kernel, against a device copy");
  app->add_option("--rows", f->rows, "Comma-separated rows of x (the decode batch)")->capture_default_str();
  app->add_option("--prefill", f->prefill,
                  "Instead: comma-separated prompt lengths; a prefill layer's products on cuBLAS and on the Hopper "
                  "kernel, alone and with the residual add or SiLU gate after each (compute capability 9.0)");
  app->add_option("--algorithms", f->options.algorithms,
                  "Also time cuBLASLt's N best-ranked algorithms for each product, and compare their bits")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  app->add_option("--hidden", f->options.hidden, "Hidden size")->capture_default_str();
  app->add_option("--q-out", f->options.q_out, "Query projection width (heads × head_dim)")->capture_default_str();
  app->add_option("--kv-out", f->options.kv_out, "K or V projection width (KV heads × head_dim)")
      ->capture_default_str();
  app->add_option("--intermediate", f->options.intermediate, "MLP width")->capture_default_str();
  app->add_option("--vocab", f->options.vocab, "Vocabulary (LM head rows)")->capture_default_str();
  app->add_option("--seconds", f->options.seconds_per_measurement, "Repeat each measurement about this long")
      ->capture_default_str();
  app->add_flag("--json", f->json, "Print JSON");
  return [f, app] { return app->parsed() ? run_gemm_bench_command(*f) : -1; };
}

}  // namespace hiq::cli
