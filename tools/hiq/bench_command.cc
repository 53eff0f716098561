// `hiq bench …`: benchmarks that measure their reference in the same run.
//
//   hiq bench transfer   the CUDA transfer engine against cudaMemcpyAsync, the
//                        staged design, and the codec kernels against a D2D copy
//   hiq bench model      the CUDA forward pass (bench_model_command.cc)
//   hiq bench attention  the CUDA attention kernels alone (bench_attention_command.cc)
//   hiq bench cpu        the CPU forward pass, N threads against one (bench_cpu_command.cc)
//   hiq bench demotion   a tiered L2's demotion on host threads against memcpy (bench_demotion_command.cc)
//   hiq bench storage    L3's backends against raw file I/O, raw Redis, memcpy (bench_storage_command.cc)
//   hiq bench serve      the load generator against a server (bench_serve_command.cc)
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "kv/model_config.h"
#include "transfer/transfer_bench.h"
#include "tools/hiq/commands.h"
#include "tools/hiq/host_tier_flags.h"
#include "tools/hiq/list_flag.h"
#include "tools/hiq/table.h"

namespace hiq::cli {
namespace {

struct TransferFlags {
  std::string model = "qwen3-8b";
  int tp = 1;
  std::string codecs = "bf16,int8,fp8,int4,int4h";
  std::string batches = "1,32,512,2048,8192,65536";
  int64_t record_align = static_cast<int64_t>(kDefaultRecordAlign);
  int gpu_sms = 16;
  double seconds = 0.25;
  bool no_staged = false;
  bool json = false;
};

Result<TransferBenchOptions> build_options(const TransferFlags& f) {
  TransferBenchOptions o;
  GeometryOptions go;
  go.tp_size = f.tp;
  HIQ_ASSIGN_OR_RETURN(o.geometry, resolve_model_geometry(f.model, go));
  HIQ_ASSIGN_OR_RETURN(o.codecs, parse_codec_list_flag(f.codecs, "--hicache-codec"));
  HIQ_ASSIGN_OR_RETURN(const std::vector<int64_t> batches, parse_integer_list_flag(f.batches, "--batches", 1, 1 << 24));
  o.batches.assign(batches.begin(), batches.end());
  HIQ_ASSIGN_OR_RETURN(o.record_align, record_align_option(f.record_align));
  if (f.gpu_sms < 1) return invalid_argument("--gpu-sms must be positive");
  o.gpu_sms = f.gpu_sms;
  if (!(f.seconds > 0)) return invalid_argument("--seconds must be positive");
  o.seconds_per_measurement = f.seconds;
  o.staged = !f.no_staged;
  return o;
}


int run_transfer(const TransferFlags& f) {
  auto options = build_options(f);
  if (!options) return report_error("bench transfer", options.status());
  const bool tty = isatty(STDERR_FILENO) != 0;
  auto report = run_transfer_bench(*options, [&](size_t done, size_t total) {
    std::fprintf(stderr, tty ? "\rhiq bench transfer: %zu/%zu" : "hiq bench transfer: %zu/%zu\n", done, total);
    if (tty && done == total) std::fputc('\n', stderr);
  });
  if (!report) return report_error("bench transfer", report.status());
  const TransferBenchReport& r = *report;

  // tokens/s of BF16 restores, to quote each codec's restore speedup over it.
  std::map<size_t, double> bf16_restore_s;
  for (const TransferBenchRow& row : r.rows)
    if (row.codec == CodecKind::kBf16) bf16_restore_s[row.tokens] = row.restore_s;
  const auto speedup = [&](const TransferBenchRow& row) {
    const auto it = bf16_restore_s.find(row.tokens);
    return it == bf16_restore_s.end() ? 0.0 : ratio(it->second, row.restore_s);
  };

  if (f.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const TransferBenchRow& row : r.rows) {
      rows.push_back({
          {"codec", std::string(codec_name(row.codec))},
          {"tokens", row.tokens},
          {"wire_bytes", row.wire_bytes},
          {"bf16_bytes", row.bf16_bytes},
          {"restore_s", row.restore_s},
          {"restore_scattered_s", row.restore_scattered_s},
          {"restore_one_launch_s", row.restore_one_launch_s},
          {"backup_s", row.backup_s},
          {"memcpy_h2d_s", row.memcpy_h2d_s},
          {"memcpy_d2h_s", row.memcpy_d2h_s},
          {"staged_restore_s", row.staged_restore_s},
          {"staged_backup_s", row.staged_backup_s},
          {"encode_kernel_s", row.encode_kernel_s},
          {"decode_kernel_s", row.decode_kernel_s},
          {"d2d_copy_s", row.d2d_copy_s},
          {"restore_tokens_per_s", static_cast<double>(row.tokens) / row.restore_s},
          {"restore_vs_memcpy", ratio(row.memcpy_h2d_s, row.restore_s)},
          {"backup_vs_memcpy", ratio(row.memcpy_d2h_s, row.backup_s)},
          {"restore_speedup_vs_bf16", speedup(row)},
      });
    }
    const nlohmann::json out = {{"gpu", r.gpu},
                                {"multiprocessors", r.multiprocessors},
                                {"model", options->geometry.name},
                                {"record_align", options->record_align},
                                {"gpu_sms", options->gpu_sms},
                                {"backup_blocks", r.backup_blocks},
                                {"load_blocks", r.load_blocks},
                                {"load_streams", r.load_streams},
                                {"threads_per_block", r.threads_per_block},
                                {"rows", rows}};
    std::cout << out.dump(2) << '\n';
    return 0;
  }

  std::cout << "hiq bench transfer: " << options->geometry.name << " on " << r.gpu << "; transfer kernels on at most "
            << options->gpu_sms << " of " << r.multiprocessors << " SMs (backup: " << r.backup_blocks
            << " blocks; load: " << r.load_streams << " streams × " << r.load_blocks << " blocks; "
            << r.threads_per_block << " threads a block)\n\n";
  std::cout << "Restore (L2 → L1) and backup (L1 → L2) through the engine, against cudaMemcpyAsync of the same "
               "wire bytes (pinned);\n'scattered': from shuffled L2 slots; 'one launch': the restore kernel over all "
               "layers at once, without per-layer events:\n";
  Table t({"codec", "tokens", "restore Mtok/s", "wire GB/s", "BF16-eq GB/s", "memcpy H2D GB/s", "vs memcpy",
           "scattered", "one launch", "vs bf16", "backup wire GB/s", "memcpy D2H GB/s", "vs memcpy"});
  for (const TransferBenchRow& row : r.rows) {
    t.add_row({std::string(codec_name(row.codec)), std::to_string(row.tokens),
               format_fixed(static_cast<double>(row.tokens) / row.restore_s / 1e6, 3),
               format_fixed(gbps(row.wire_bytes, row.restore_s), 1), format_fixed(gbps(row.bf16_bytes, row.restore_s), 1),
               format_fixed(gbps(row.wire_bytes, row.memcpy_h2d_s), 1),
               format_fixed(100 * ratio(row.memcpy_h2d_s, row.restore_s), 0) + " %",
               format_fixed(100 * ratio(row.memcpy_h2d_s, row.restore_scattered_s), 0) + " %",
               format_fixed(100 * ratio(row.memcpy_h2d_s, row.restore_one_launch_s), 0) + " %",
               format_fixed(speedup(row), 2) + "×", format_fixed(gbps(row.wire_bytes, row.backup_s), 1),
               format_fixed(gbps(row.wire_bytes, row.memcpy_d2h_s), 1),
               format_fixed(100 * ratio(row.memcpy_d2h_s, row.backup_s), 0) + " %"});
  }
  t.print(std::cout);
  if (options->staged) {
    std::cout << "\nThe staged design (codec kernel on device memory + cudaMemcpyAsync per layer, pipelined), "
                 "against the fused engine:\n";
    Table s({"codec", "tokens", "staged restore GB/s", "fused restore GB/s", "staged backup GB/s",
             "fused backup GB/s"});
    for (const TransferBenchRow& row : r.rows)
      s.add_row({std::string(codec_name(row.codec)), std::to_string(row.tokens),
                 format_fixed(gbps(row.wire_bytes, row.staged_restore_s), 1),
                 format_fixed(gbps(row.wire_bytes, row.restore_s), 1),
                 format_fixed(gbps(row.wire_bytes, row.staged_backup_s), 1),
                 format_fixed(gbps(row.wire_bytes, row.backup_s), 1)});
    s.print(std::cout);
  }
  std::cout << "\nCodec kernels alone (device memory, every SM), bytes read + written, against a device-to-device "
               "copy of the BF16 bytes:\n";
  Table k({"codec", "tokens", "encode GB/s", "decode GB/s", "D2D copy GB/s", "encode vs D2D", "decode vs D2D"});
  for (const TransferBenchRow& row : r.rows) {
    const size_t moved = row.bf16_bytes + row.wire_bytes, copied = 2 * row.bf16_bytes;
    const double d2d = gbps(copied, row.d2d_copy_s);
    k.add_row({std::string(codec_name(row.codec)), std::to_string(row.tokens),
               format_fixed(gbps(moved, row.encode_kernel_s), 0), format_fixed(gbps(moved, row.decode_kernel_s), 0),
               format_fixed(d2d, 0), format_fixed(100 * gbps(moved, row.encode_kernel_s) / d2d, 0) + " %",
               format_fixed(100 * gbps(moved, row.decode_kernel_s) / d2d, 0) + " %"});
  }
  k.print(std::cout);
  return 0;
}

}  // namespace

Subcommand add_bench_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand("bench", "Benchmarks, each against a reference measured in the same run");
  app->require_subcommand(1);
  auto f = std::make_shared<TransferFlags>();
  CLI::App* transfer = app->add_subcommand(
      "transfer", "CUDA transfer engine: restore/backup vs cudaMemcpyAsync, codec kernels vs a D2D copy");
  transfer->add_option("--model", f->model, "Model preset or config.json")->capture_default_str();
  transfer->add_option("--tp", f->tp, "Tensor-parallel ranks (KV heads per rank)")->capture_default_str();
  transfer->add_option("--hicache-codec", f->codecs, "Comma-separated codecs")->capture_default_str();
  transfer->add_option("--batches", f->batches, "Comma-separated tokens per operation")->capture_default_str();
  transfer->add_option("--record-align", f->record_align, "L2 record alignment in bytes")->capture_default_str();
  transfer->add_option("--gpu-sms", f->gpu_sms, "Blocks (one per SM) of the transfer kernels")->capture_default_str();
  transfer->add_option("--seconds", f->seconds, "Repeat each measurement about this long")->capture_default_str();
  transfer->add_flag("--no-staged", f->no_staged, "Skip the staged-design comparison");
  transfer->add_flag("--json", f->json, "Print JSON");
  const std::function<int()> run_model = add_bench_model_command(*app);
  const std::function<int()> run_attention = add_bench_attention_command(*app);
  const std::function<int()> run_gemm = add_bench_gemm_command(*app);
  const std::function<int()> run_cpu = add_bench_cpu_command(*app);
  const std::function<int()> run_storage = add_bench_storage_command(*app);
  const std::function<int()> run_demotion = add_bench_demotion_command(*app);
  const std::function<int()> run_serve = add_bench_serve_command(*app);
  return {app, [f, transfer, run_model, run_attention, run_gemm, run_cpu, run_storage, run_demotion, run_serve] {
            if (transfer->parsed()) return run_transfer(*f);
            if (const int model = run_model(); model != -1) return model;
            if (const int attention = run_attention(); attention != -1) return attention;
            if (const int gemm = run_gemm(); gemm != -1) return gemm;
            if (const int cpu = run_cpu(); cpu != -1) return cpu;
            if (const int storage = run_storage(); storage != -1) return storage;
            if (const int demotion = run_demotion(); demotion != -1) return demotion;
            return run_serve();
          }};
}

}  // namespace hiq::cli
