// `hiq bench model --model DIR`: the CUDA forward pass — prefill tokens/s,
// decode step time against its memory-bound floor, the device time of each
// by component, and prompts on a prefix restored from L2 through each codec
// against recomputing them (model/model_bench.h says what each figure is);
// with --tp-size N, the model split over N GPUs against one.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "core/units.h"
#include "model/loaded_model.h"
#include "model/cuda_tp_model.h"
#include "model/model_bench.h"
#include "tools/hiq/commands.h"
#include "tools/hiq/cuda_graph_flags.h"
#include "tools/hiq/list_flag.h"
#include "tools/hiq/table.h"
#include "tools/hiq/tp_flags.h"

namespace hiq::cli {
namespace {

struct ModelBenchFlags {
  std::string model;
  std::string prefill = "512,2048,8192";
  std::string decode_batches = "1,8,32";
  int decode_context = 2048;
  std::string codecs = "bf16,int8,fp8,int4,int4h";
  int restore_prompt = 2048;
  int restore_prefix = 1920;
  double seconds = 1.0;
  bool profiler_range = false;
  CudaModelOptions cuda;
  int tp_size = 1;
  TpFlags tp;
  bool json = false;
};

Result<std::vector<int>> parse_counts(const std::string& list, const char* flag) {
  HIQ_ASSIGN_OR_RETURN(const std::vector<int64_t> counts, parse_integer_list_flag(list, flag, 1, 1 << 20));
  return std::vector<int>(counts.begin(), counts.end());
}

Result<ModelBenchOptions> build_options(const ModelBenchFlags& f) {
  ModelBenchOptions o;
  HIQ_ASSIGN_OR_RETURN(o.prefill_tokens, parse_counts(f.prefill, "--prefill"));
  HIQ_ASSIGN_OR_RETURN(o.decode_batches, parse_counts(f.decode_batches, "--decode-batches"));
  if (f.decode_context < 1) return invalid_argument("--decode-context must be positive");
  o.decode_context = f.decode_context;
  HIQ_ASSIGN_OR_RETURN(o.restore_codecs, parse_codec_list_flag(f.codecs, "--hicache-codec"));
  if (f.restore_prefix < 1 || f.restore_prefix >= f.restore_prompt)
    return invalid_argument("--restore-prefix must be from 1 to --restore-prompt − 1");
  o.restore_prompt = f.restore_prompt;
  o.restore_prefix = f.restore_prefix;
  if (!(f.seconds > 0)) return invalid_argument("--seconds must be positive");
  o.seconds_per_measurement = f.seconds;
  o.profiler_range = f.profiler_range;
  HIQ_RETURN_IF_ERROR(check_cuda_graph_flags(f.cuda));
  o.cuda = f.cuda;
  return o;
}

std::string ms(double seconds) { return format_fixed(seconds * 1e3, 2); }

Result<CudaTpOptions> build_tp_options(const ModelBenchFlags& f) {
  CudaTpOptions tp;
  HIQ_RETURN_IF_ERROR(apply_tp_flags(f.tp, tp.devices, tp.collective));
  if (f.profiler_range && f.tp_size > 1)
    return invalid_argument("--profiler-range marks one GPU's decode steps: it needs --tp-size 1");
  if (!tp.devices.empty() && f.tp_size == 1)
    return invalid_argument("--tp-devices place tensor-parallel ranks: they need --tp-size above 1");
  tp.model = f.cuda;
  const Status valid = tp.validate(f.tp_size);
  if (!valid.is_ok() && valid.message().starts_with("devices")) return invalid_argument("--tp-" + valid.message());
  HIQ_RETURN_IF_ERROR(valid);
  return tp;
}

// The split model's rows against one GPU's, and the collective alone (model/model_bench.h).
int print_tp_report(const TpBenchReport& r, bool json) {
  if (json) {
    std::cout << to_json(r) << '\n';
    return 0;
  }
  std::cout << "tp " << r.tp_size << " over GPUs";
  for (size_t i = 0; i < r.devices.size(); ++i)
    std::cout << (i ? ", " : " ") << r.devices[i] << " (" << r.gpus[i] << ")";
  std::cout << "; collective " << tp_collective_name(r.collective) << "; weights "
            << format_fixed(static_cast<double>(r.weight_bytes) / 1e9, 2) << " GB in all; copy GPU " << r.devices[0]
            << " → " << r.devices[r.devices.size() > 1 ? 1 : 0] << " "
            << format_fixed(r.peer_copy_bytes_per_s / 1e9, 1) << " GB/s\n";
  if (!r.one_gpu_note.empty()) std::cout << r.one_gpu_note << '\n';
  std::cout << '\n';
  Table rows({"pass", "tp ms", "one GPU ms", "speedup", "all-reduce bytes", "all-reduce us", "busbw GB/s",
              "all-reduces / pass", "share of pass"});
  const double n = r.tp_size;
  for (const auto& row : r.rows) {
    const std::string pass = row.decode ? "decode " + std::to_string(row.tokens) + " x " + std::to_string(row.context)
                                        : "prefill " + std::to_string(row.tokens);
    const double busbw = static_cast<double>(row.all_reduce_bytes) / row.all_reduce_seconds * 2 * (n - 1) / n;
    rows.add_row({pass, ms(row.seconds), row.one_gpu_seconds > 0 ? ms(row.one_gpu_seconds) : "-",
                  row.one_gpu_seconds > 0 ? format_fixed(row.one_gpu_seconds / row.seconds, 2) + "x" : "-",
                  format_bytes(row.all_reduce_bytes), format_fixed(row.all_reduce_seconds * 1e6, 1),
                  format_fixed(busbw / 1e9, 1), std::to_string(row.all_reduces),
                  format_fixed(100 * row.all_reduces * row.all_reduce_seconds / row.seconds, 1) + " %"});
  }
  rows.print(std::cout);
  if (r.restore.empty()) return 0;
  std::cout << '\n';
  // Ranks sharing a GPU share its link: the total rate says more there than each rank's.
  Table restore({"codec", "tokens", "restore ms", "all ranks GB/s", "per rank GB/s", "pinned copy GB/s",
                 "copy time / restore time"});
  const auto gb_per_s = [](double bytes, double seconds) {
    return seconds > 0 ? format_fixed(bytes / seconds / 1e9, 1) : std::string("-");
  };
  for (const auto& x : r.restore) {
    const double per_rank = static_cast<double>(x.bytes) / n;
    restore.add_row({std::string(codec_name(x.codec)), std::to_string(x.tokens), ms(x.seconds),
                     gb_per_s(static_cast<double>(x.bytes), x.seconds), gb_per_s(per_rank, x.seconds),
                     gb_per_s(per_rank, x.copy_seconds),
                     x.seconds > 0 ? format_fixed(x.copy_seconds / x.seconds, 2) : std::string("-")});
  }
  restore.print(std::cout);
  return 0;
}

int run_model_bench_command(const ModelBenchFlags& f) {
  auto options = build_options(f);
  if (!options) return report_error("bench model", options.status());
  auto tp = build_tp_options(f);
  if (!tp) return report_error("bench model", tp.status());
  auto model = LoadedModel::load(f.model);
  if (!model) return report_error("bench model", model.status());
  const bool tty = isatty(STDERR_FILENO) != 0;
  const auto progress = [&](size_t done, size_t total) {
    std::fprintf(stderr, tty ? "\rhiq bench model: %zu/%zu" : "hiq bench model: %zu/%zu\n", done, total);
    if (tty && done == total) std::fputc('\n', stderr);
  };
  if (f.tp_size > 1) {
    auto split = run_tp_model_bench((*model)->config(), (*model)->shape(), (*model)->weights(), f.tp_size, *tp,
                                    *options, progress);
    if (!split) return report_error("bench model", split.status());
    return print_tp_report(*split, f.json);
  }
  auto report = run_model_bench((*model)->config(), (*model)->shape(), (*model)->weights(), *options, progress);
  if (!report) return report_error("bench model", report.status());
  const ModelBenchReport& r = *report;

  if (f.json) {
    std::cout << to_json(r) << '\n';
    return 0;
  }
  std::cout << r.gpu << ": weights " << format_fixed(static_cast<double>(r.weight_bytes) / 1e9, 2)
            << " GB, device copy " << format_fixed(r.device_copy_bytes_per_s / 1e12, 2) << " TB/s (read + write)\n\n";
  Table prefill({"prefill tokens", "ms", "tokens/s"});
  for (const auto& p : r.prefill)
    prefill.add_row({std::to_string(p.tokens), ms(p.seconds), format_fixed(p.tokens / p.seconds, 0)});
  prefill.print(std::cout);
  std::cout << '\n';
  // The step through its CUDA graph (the headline), and launched kernel by kernel.
  Table decode({"decode batch", "context", r.cuda_graphs ? "graph step ms" : "step ms", "eager step ms",
                "eager / graph", "floor ms", "step / floor"});
  for (const auto& d : r.decode)
    decode.add_row({std::to_string(d.batch), std::to_string(d.context), ms(d.step_seconds), ms(d.eager_step_seconds),
                    r.cuda_graphs ? format_fixed(d.eager_step_seconds / d.graph_step_seconds, 2) + "x" : "-",
                    ms(d.floor_seconds), format_fixed(d.step_seconds / d.floor_seconds, 2)});
  decode.print(std::cout);
  if (r.cuda_graphs)
    std::cout << "CUDA graphs: " << r.graphs.captured << " captured, " << r.graphs.replayed << " steps replayed, "
              << r.graphs.capture_failures << " failed captures\n";
  std::cout << '\n';
  // Device time of a profiled pass by component (model/model_bench.h).
  Table components({"pass", "gemm ms", "gemm TFLOP/s", "attention ms", "attention TFLOP/s", "norm+elementwise ms",
                    "LM head ms", "other ms", "sum ms"});
  const auto add_components = [&](const std::string& pass, const ModelBenchReport::Components& c) {
    const ForwardProfile& t = c.seconds;
    components.add_row({pass, ms(t.gemm_seconds), format_fixed(c.gemm_flops / t.gemm_seconds / 1e12, 0),
                        ms(t.attention_seconds), format_fixed(c.attention_flops / t.attention_seconds / 1e12, 1),
                        ms(t.norm_elementwise_seconds), ms(t.lm_head_seconds), ms(t.other_seconds),
                        ms(t.total_seconds())});
  };
  for (const auto& p : r.prefill) add_components("prefill " + std::to_string(p.tokens), p.components);
  for (const auto& d : r.decode)
    add_components("decode " + std::to_string(d.batch) + " x " + std::to_string(d.context), d.components);
  components.print(std::cout);
  std::cout << '\n';
  Table restore({"codec", "restored / prompt", "restore+forward ms", "recompute ms", "speedup", "logits rel. error",
                 "same next token"});
  for (const auto& x : r.restore)
    restore.add_row({std::string(codec_name(x.codec)), std::to_string(x.prefix) + " / " + std::to_string(x.prompt),
                     ms(x.restored_seconds), ms(x.recompute_seconds),
                     format_fixed(x.recompute_seconds / x.restored_seconds, 2) + "x",
                     format_fixed(x.logits_relative_error * 100, 3) + " %", x.same_next_token ? "yes" : "no"});
  restore.print(std::cout);
  return 0;
}

}  // namespace

std::function<int()> add_bench_model_command(CLI::App& bench) {
  auto f = std::make_shared<ModelBenchFlags>();
  CLI::App* app = bench.add_subcommand(
      "model", "CUDA forward pass: prefill tokens/s, decode step vs its memory-bound floor, device time by component, "
               "restored vs recomputed prompts");
  app->add_option("--model", f->model, "Model directory (config.json and *.safetensors)")->required();
  app->add_option("--prefill", f->prefill, "Comma-separated prompt lengths")->capture_default_str();
  app->add_option("--decode-batches", f->decode_batches, "Comma-separated decode batch sizes")->capture_default_str();
  app->add_option("--decode-context", f->decode_context, "Context tokens of each decoding sequence")
      ->capture_default_str();
  app->add_option("--hicache-codec", f->codecs, "Comma-separated codecs of the restore rows")->capture_default_str();
  app->add_option("--restore-prompt", f->restore_prompt, "Prompt tokens of the restore rows")->capture_default_str();
  app->add_option("--restore-prefix", f->restore_prefix, "Of which restored from L2")->capture_default_str();
  app->add_option("--seconds", f->seconds, "Repeat each measurement about this long")->capture_default_str();
  app->add_flag("--profiler-range", f->profiler_range,
                "Run one more decode step of each batch between cudaProfilerStart and cudaProfilerStop, for "
                "`ncu --profile-from-start off` (scripts/decode-breakdown)");
  add_cuda_graph_flags(app, f->cuda);
  app->add_option("--tp-size", f->tp_size,
                  "Tensor-parallel ranks, one thread and GPU each; above 1 the rows are set against one GPU, and "
                  "the restore rows time each rank's transfers")
      ->capture_default_str()
      ->check(CLI::Range(1, 8));
  add_tp_flags(app, f->tp);
  app->add_flag("--json", f->json, "Print JSON");
  return [f, app] { return app->parsed() ? run_model_bench_command(*f) : -1; };
}

}  // namespace hiq::cli
