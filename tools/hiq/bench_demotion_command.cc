// `hiq bench demotion`: how fast a tiered host tier re-encodes cold nodes one
// rung down (transfer/demotion_engine.h), against memcpy of the same bytes
// on as many threads, in the same run. A pool of the model's geometry is
// filled with encoded rows of Gaussian values, cut into jobs the size of a
// radix node (one job's rows are drawn and encoded into every job), and
// demoted in place on 1, 2, 4 … threads, each running the
// CPU codecs or (--device gpu) driving the GPU's (transfer/cuda_demoter.h);
// the records are restored from a pristine copy before each run, and every
// GPU run's pool must equal the CPU's byte for byte. Demotion has to keep
// pace with the backups a full tier takes: tokens/s is the figure to set
// against the prefill rate.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "codec/numeric.h"
#include "core/units.h"
#include "kv/model_config.h"
#include "memory/cuda_device_kv_pool.h"
#include "memory/host_kv_pool.h"
#include "tools/hiq/commands.h"
#include "tools/hiq/list_flag.h"
#include "tools/hiq/table.h"
#include "transfer/cuda_demoter.h"
#include "transfer/demotion_engine.h"

namespace hiq::cli {
namespace {

struct DemotionBenchFlags {
  std::string model = "qwen3-8b";
  std::string codec = "tiered:int8,int4h";
  int64_t tokens = 16384;
  int64_t job_tokens = 2048;
  std::string threads = "1,2,4,8";
  std::string devices = "cpu";
  int repeats = 3;
  bool json = false;
};

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// memcpy of `bytes` split over `threads`: the reference.
double memcpy_seconds(std::byte* dst, const std::byte* src, size_t bytes, int threads) {
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  const size_t chunk = (bytes + static_cast<size_t>(threads) - 1) / static_cast<size_t>(threads);
  for (int t = 0; t < threads; ++t) {
    const size_t begin = std::min(bytes, static_cast<size_t>(t) * chunk), end = std::min(bytes, begin + chunk);
    workers.emplace_back([=] { std::memcpy(dst + begin, src + begin, end - begin); });
  }
  for (auto& w : workers) w.join();
  return seconds_since(start);
}

int run_demotion_bench(const DemotionBenchFlags& f) {
  const std::string what = "bench demotion";
  if (f.tokens < 1 || f.job_tokens < 1 || f.repeats < 1)
    return report_error(what, invalid_argument("--tokens, --job-tokens and --repeats must be positive"));
  auto threads = parse_integer_list_flag(f.threads, "--threads", 1, 256, ListRepeats::kRefuse);
  if (!threads) return report_error(what, threads.status());
  auto parsed_devices = parse_list_flag(f.devices, "--device");
  if (!parsed_devices) return report_error(what, parsed_devices.status());
  const std::vector<std::string> devices = std::move(*parsed_devices);
  for (const std::string& d : devices)
    if (d != "cpu" && d != "gpu")
      return report_error(what, invalid_argument("--device takes cpu and gpu, not '" + d + "'"));
  auto geometry = resolve_model_geometry(f.model);
  if (!geometry) return report_error(what, geometry.status());
  HostKvPoolOptions o;
  if (Status st = parse_host_codec(f.codec, o); !st.is_ok()) return report_error(what, st.with_context("--hicache-codec"));
  if (o.demotion.empty()) return report_error(what, invalid_argument("--hicache-codec must be a ladder (tiered:…)"));
  o.capacity_tokens = static_cast<uint64_t>(f.tokens);
  auto made = HostKvPool::create(*geometry, o, static_cast<size_t>(f.tokens));
  if (!made) return report_error(what, made.status());
  HostKvPool& pool = **made;
  const auto tokens = static_cast<size_t>(f.tokens);

  // Jobs of job_tokens tokens, each one run of slots, encoded at rung 0.
  std::vector<DemotionJob> jobs;
  for (size_t begin = 0; begin < tokens; begin += static_cast<size_t>(f.job_tokens)) {
    const size_t n = std::min(tokens - begin, static_cast<size_t>(f.job_tokens));
    auto slots = pool.allocate(n, 0);
    if (!slots) return report_error(what, slots.status());
    jobs.push_back({*slots, pool.demoted_slots(*slots, 0, 1), 0, 1});
  }
  std::cerr << "hiq bench demotion: encoding " << tokens << " tokens at " << codec_name(pool.codec(0).k) << "\n";
  {
    // One job's worth of Gaussian rows per (layer, part), encoded into every
    // job: the rate does not depend on which values, and drawing them all
    // would take longer than the runs.
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int layer = 0; layer < geometry->num_layers; ++layer)
      for (int p = 0; p < geometry->rows_per_layer(); ++p) {
        const auto part = static_cast<KvPart>(p);
        const size_t row = geometry->row_shape(part).elements();
        std::vector<uint16_t> rows(row * static_cast<size_t>(f.job_tokens));
        for (uint16_t& v : rows) v = numeric::float_to_bf16(normal(rng));
        for (const DemotionJob& job : jobs) {
          std::vector<uint32_t> index(job.from.size());
          for (size_t i = 0; i < index.size(); ++i) index[i] = static_cast<uint32_t>(i);
          encode_rows_indexed(pool.layout(part, 0), rows.data(), index, pool.plane(layer, part, 0), job.from, nullptr,
                              CodecImpl::kAuto, pool.record_stride(part));
        }
      }
  }
  std::byte* base = pool.plane(0, KvPart::kK, 0);
  const size_t bytes = tokens * pool.bytes_per_token(0);
  const std::vector<std::byte> pristine(base, base + pool.reserved_bytes());
  std::vector<std::byte> scratch(bytes);

  // The GPU's runs must leave the pool as the CPU's do: the CPU's result first.
  // A server's pool is pinned (its transfer engine pins it): so is this one
  // for the GPU's copies.
  std::vector<std::byte> expected;
  std::shared_ptr<CudaDemoter> gpu;
  PinnedHostMemory pinned;
  if (std::find(devices.begin(), devices.end(), "gpu") != devices.end()) {
    auto made_gpu = make_cuda_demoter(pool);
    if (!made_gpu) return report_error(what, made_gpu.status().with_context("--device gpu"));
    gpu = std::move(*made_gpu);
    auto pin = PinnedHostMemory::pin(base, pool.reserved_bytes());
    if (!pin) return report_error(what, pin.status().with_context("--device gpu"));
    pinned = std::move(*pin);
    std::vector<std::byte> job_scratch;
    for (const DemotionJob& job : jobs)
      if (Status st = demote_records(pool, job, job_scratch); !st.is_ok()) return report_error(what, st);
    expected.assign(base, base + pool.reserved_bytes());
  }

  struct Row {
    std::string device;
    int threads;
    double memcpy_gbps, demotion_gbps, tokens_per_s;
  };
  std::vector<Row> rows;
  for (const std::string& device : devices)
    for (int64_t t : *threads) {
      const int n = static_cast<int>(t);
      double best_memcpy = 1e30, best_demotion = 1e30;
      for (int r = 0; r < f.repeats; ++r) {
        best_memcpy = std::min(best_memcpy, memcpy_seconds(scratch.data(), base, bytes, n));
        std::memcpy(base, pristine.data(), pristine.size());  // rung 0 again, outside the timing
        DemotionEngineOptions options{.threads = n, .codec_impl = CodecImpl::kAuto, .backend = {}, .before_job = {}};
        if (device == "gpu") options.backend = demotion_backend(gpu);
        DemotionEngine engine(pool, std::move(options));
        const auto start = Clock::now();
        for (const DemotionJob& job : jobs) engine.submit(job);
        engine.drain();
        best_demotion = std::min(best_demotion, seconds_since(start));
        for (const DemotionCompletion& c : engine.poll())
          if (!c.status.is_ok()) return report_error(what, c.status);
        if (device == "gpu" && std::memcmp(base, expected.data(), expected.size()) != 0)
          return report_error(what, internal_error("the GPU's demoted records differ from the CPU's"));
      }
      rows.push_back({device, n, static_cast<double>(bytes) / best_memcpy / 1e9,
                      static_cast<double>(bytes) / best_demotion / 1e9, static_cast<double>(tokens) / best_demotion});
    }
  if (gpu && gpu->stats().host_jobs > 0)
    return report_error(what, internal_error(std::to_string(gpu->stats().host_jobs) +
                                             " jobs failed on the GPU and were finished on the host: the GPU rows "
                                             "are not the GPU's"));

  const std::string from = std::string(codec_name(pool.codec(0).k)), to = std::string(codec_name(pool.codec(1).k));
  if (f.json) {
    nlohmann::json out = {{"model", f.model},         {"from", from},
                          {"to", to},                 {"tokens", tokens},
                          {"job_tokens", f.job_tokens}, {"bytes_per_token", pool.bytes_per_token(0)},
                          {"hardware_threads", std::thread::hardware_concurrency()}};
    for (const Row& r : rows)
      out["rows"].push_back({{"device", r.device},
                             {"threads", r.threads},
                             {"memcpy_gb_per_s", r.memcpy_gbps},
                             {"demotion_gb_per_s", r.demotion_gbps},
                             {"tokens_per_s", r.tokens_per_s},
                             {"of_memcpy", r.demotion_gbps / r.memcpy_gbps}});
    std::cout << out.dump(2) << '\n';
    return 0;
  }
  std::cout << "demotion " << from << " > " << to << ", " << f.model << ": " << tokens << " tokens of "
            << format_count(pool.bytes_per_token(0)) << " B in jobs of " << f.job_tokens << "; GB/s of " << from
            << " records read, best of " << f.repeats << "\n";
  Table table({"device", "threads", "memcpy GB/s", "demotion GB/s", "of memcpy", "tokens/s"});
  for (const Row& r : rows)
    table.add_row({r.device, std::to_string(r.threads), format_fixed(r.memcpy_gbps, 2),
                   format_fixed(r.demotion_gbps, 2),
                   format_fixed(100 * r.demotion_gbps / r.memcpy_gbps, 1) + " %",
                   format_count(static_cast<uint64_t>(r.tokens_per_s))});
  table.print(std::cout);
  return 0;
}

}  // namespace

std::function<int()> add_bench_demotion_command(CLI::App& bench) {
  auto f = std::make_shared<DemotionBenchFlags>();
  CLI::App* app = bench.add_subcommand(
      "demotion", "Demotion one rung down (CPU or GPU codecs), against memcpy of the same bytes on as many threads");
  app->add_option("--model", f->model, "Model (a preset or a directory with config.json): the KV geometry")
      ->capture_default_str();
  app->add_option("--hicache-codec", f->codec, "The ladder; its first two rungs are measured")->capture_default_str();
  app->add_option("--tokens", f->tokens, "Tokens demoted per run")->capture_default_str();
  app->add_option("--job-tokens", f->job_tokens, "Tokens of one job (one radix node)")->capture_default_str();
  app->add_option("--threads", f->threads, "Thread counts to measure, comma-separated")->capture_default_str();
  app->add_option("--device", f->devices, "Where the threads demote: cpu, gpu, or cpu,gpu")->capture_default_str();
  app->add_option("--repeats", f->repeats, "Runs per thread count; the best is kept")->capture_default_str();
  app->add_flag("--json", f->json, "Print JSON");
  return [f, app] { return app->parsed() ? run_demotion_bench(*f) : -1; };
}

}  // namespace hiq::cli
