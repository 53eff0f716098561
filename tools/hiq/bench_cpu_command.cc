// `hiq bench cpu --model DIR`: the CPU forward pass on N threads against one
// thread, in the same run — a prefill, a decode step, and a batch of decode
// steps in one pass, each timed on both, and their logits compared (the split
// must not change a bit; nor may the batch: each of its sequences must get
// the logits it gets alone). A fourth row is the machine's own ceiling:
// multiply-adds in registers, no memory traffic, split by the same pool. A
// VM's vCPUs may share a core or be taken by neighbours, so the passes'
// speedups are also given as a share of that row's. A fifth reads as many
// bytes as the model's matrices (what a decode step streams; at most 1 GiB)
// through the same pool: how far the machine's memory lets N cores outrun
// one.
#include <algorithm>
#include <functional>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/median_time.h"
#include "core/parallel.h"
#include "model/cpu_forward.h"
#include "model/loaded_model.h"
#include "tools/hiq/commands.h"
#include "tools/hiq/table.h"

namespace hiq::cli {
namespace {

struct CpuBenchFlags {
  std::string model = "models/hiq-tiny-python";
  int threads = 0;  // 0: every hardware thread
  int prefill = 512;
  int decode_context = 512;
  int decode_batch = 8;
  double seconds = 1.0;
  bool json = false;
};

// One thread and N take turns, a short median each, so that a slow stretch
// of a shared machine (a VM's neighbours) falls on both sides alike; the
// speedup is the median of the rounds' ratios.
constexpr int kRounds = 7;

struct Timing {
  std::vector<double> seconds;  // each round's median (core/median_time.h)
  std::vector<float> results;   // of the last repeat: logits (a batch's, one sequence after another), or sums
};

// The ceiling row's job: `chunks` pieces, one per pool index, each 64
// independent chains of multiply-adds in registers (enough to keep a core's
// floating-point units busy whether or not the compiler packs them into
// vectors). Each chunk's sum depends on its index alone, so any split gives
// the same bits.
std::vector<float> multiply_adds(int64_t chunks) {
  constexpr int kChains = 64;
  constexpr int kIterations = 1 << 16;
  std::vector<float> sums(static_cast<size_t>(chunks));
  parallel_for(chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      float acc[kChains];
      for (int j = 0; j < kChains; ++j) acc[j] = static_cast<float>(c + j) * 1e-3f;
      for (int i = 0; i < kIterations; ++i)
        for (float& a : acc) a = a * 0.999f + 1e-4f;
      float sum = 0.f;
      for (const float a : acc) sum += a;
      sums[static_cast<size_t>(c)] = sum;
    }
  });
  return sums;
}

// The memory row's job: one pass over `words`, in `chunks` pieces, one per
// pool index, each piece's words summed; each sum depends on its index alone.
std::vector<float> read_words(const std::vector<uint64_t>& words, int64_t chunks) {
  std::vector<float> sums(static_cast<size_t>(chunks));
  parallel_for(chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const size_t first = words.size() * static_cast<size_t>(c) / static_cast<size_t>(chunks),
                   last = words.size() * static_cast<size_t>(c + 1) / static_cast<size_t>(chunks);
      uint64_t acc[4] = {};
      size_t i = first;
      for (; i + 4 <= last; i += 4)
        for (size_t j = 0; j < 4; ++j) acc[j] += words[i + j];
      for (; i < last; ++i) acc[0] += words[i];
      sums[static_cast<size_t>(c)] = static_cast<float>((acc[0] + acc[1] + acc[2] + acc[3]) % 1000003);
    }
  });
  return sums;
}

// The bytes of the model's matrices: what a decode step reads once.
size_t matrix_bytes(const CpuModelWeights& w) {
  const auto bytes = [](const cpu::MatrixView& v) {
    return static_cast<size_t>(v.rows) * static_cast<size_t>(v.cols) * cpu::weight_element_bytes(v.type);
  };
  size_t total = bytes(w.lm_head);
  for (const LayerWeights& l : w.layers)
    for (const cpu::MatrixView* v : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj})
      total += bytes(*v);
  return total;
}

double median_of(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

Status time_round(const std::function<Result<std::vector<float>>()>& forward, double seconds, Timing& t) {
  HIQ_ASSIGN_OR_RETURN(const double median, median_seconds(seconds, [&]() -> Status {
                         HIQ_ASSIGN_OR_RETURN(t.results, forward());
                         return Status::ok();
                       }, /*min_runs=*/1));
  t.seconds.push_back(median);
  return Status::ok();
}

int run_cpu_bench(const CpuBenchFlags& f) {
  if (f.threads < 0) return report_error("bench cpu", invalid_argument("--threads must be positive, or 0 (all)"));
  if (f.prefill < 1 || f.decode_context < 1 || f.decode_batch < 1)
    return report_error("bench cpu", invalid_argument("--prefill, --decode-context and --decode-batch must be positive"));
  if (!(f.seconds > 0)) return report_error("bench cpu", invalid_argument("--seconds must be positive"));
  auto model = LoadedModel::load(f.model);
  if (!model) return report_error("bench cpu", model.status());
  const LoadedModel& m = **model;
  const int threads = f.threads > 0 ? f.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const auto prefill = static_cast<size_t>(f.prefill), context = static_cast<size_t>(f.decode_context);
  const auto batch = static_cast<size_t>(f.decode_batch);
  // Slots [0, context) hold the decode steps' shared context; the batch's
  // sequence b writes its new token into slot context + b.
  auto l1 = make_host_memory_device_pool(m.config().kv_geometry(), std::max(prefill, context + batch));
  if (!l1) return report_error("bench cpu", l1.status());
  const auto vocab = static_cast<size_t>(m.shape().vocab_size);
  std::vector<int32_t> tokens(std::max(prefill, context + 1));
  std::vector<SlotId> slots(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((i * 7919 + 13) % vocab);
    slots[i] = static_cast<SlotId>(i);
  }
  const auto run = [&](size_t n, size_t first_new) {
    return [&, n, first_new] {
      return cpu_forward(m.shape(), m.weights(), **l1, std::span(tokens).first(n), std::span(slots).first(n),
                         first_new);
    };
  };
  // The decode batch: `batch` requests on the same context, each with its own next token.
  std::vector<std::vector<int32_t>> batch_tokens(batch);
  std::vector<std::vector<SlotId>> batch_slots(batch);
  std::vector<CpuSequence> sequences(batch);
  for (size_t b = 0; b < batch; ++b) {
    batch_tokens[b].assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(context));
    batch_tokens[b].push_back(static_cast<int32_t>((b * 31 + 7) % vocab));
    batch_slots[b].assign(slots.begin(), slots.begin() + static_cast<std::ptrdiff_t>(context));
    batch_slots[b].push_back(static_cast<SlotId>(context + b));
    sequences[b] = CpuSequence{batch_tokens[b], batch_slots[b], context, false, nullptr};
  }
  const auto run_batch = [&]() -> Result<std::vector<float>> {
    HIQ_ASSIGN_OR_RETURN(std::vector<std::vector<float>> each,
                         cpu_forward_batch(m.shape(), m.weights(), **l1, sequences));
    std::vector<float> all;
    for (const std::vector<float>& logits : each) all.insert(all.end(), logits.begin(), logits.end());
    return all;
  };
  // The decode steps' context KV, once (one thread computes the same bits as N).
  if (auto warm = run(context, 0)(); !warm) return report_error("bench cpu", warm.status());

  // Several chunks a thread at any thread count, so that the split stays even.
  const auto machine_job = [chunks = int64_t{8} * threads] {
    return Result<std::vector<float>>(multiply_adds(chunks));
  };
  // As many bytes as the model's matrices, written once here so that they are
  // resident; at most 1 GiB (a larger model's step reads from memory anyway).
  constexpr size_t kMostMemoryRowBytes = size_t{1} << 30;
  const std::vector<uint64_t> words(std::min(matrix_bytes(m.weights()), kMostMemoryRowBytes) / sizeof(uint64_t) + 1,
                                    uint64_t{0x9E3779B97F4A7C15});
  const auto memory_job = [&words, chunks = int64_t{8} * threads] {
    return Result<std::vector<float>>(read_words(words, chunks));
  };
  struct Row {
    std::string what;
    size_t tokens;
    std::function<Result<std::vector<float>>()> forward;
    Timing one, many;
    double one_seconds() const { return median_of(one.seconds); }
    double many_seconds() const { return median_of(many.seconds); }
    double speedup() const {
      std::vector<double> ratios;
      for (size_t i = 0; i < one.seconds.size(); ++i) ratios.push_back(one.seconds[i] / many.seconds[i]);
      return median_of(ratios);
    }
  };
  std::vector<Row> rows = {{"prefill", prefill, run(prefill, 0), {}, {}},
                           {"decode step", 1, run(context + 1, context), {}, {}},
                           {"decode batch of " + std::to_string(batch), batch, run_batch, {}, {}},
                           {"machine: multiply-adds", 0, machine_job, {}, {}},
                           {"machine: reading the matrices", 0, memory_job, {}, {}}};
  const Row& decode_batch = rows[2];
  const Row& machine = rows[3];
  const Row& memory = rows[4];
  const int before = parallel_threads();
  for (Row& row : rows) {
    // One thread, then `threads` (also 1 with --threads 1: the same pass twice), in turns.
    for (int round = 0; round < kRounds; ++round) {
      for (Timing* timing : {&row.one, &row.many}) {
        set_parallel_threads(timing == &row.one ? 1 : threads);
        if (Status s = time_round(row.forward, f.seconds / (2 * kRounds), *timing); !s.is_ok())
          return report_error("bench cpu", s);
      }
    }
  }
  // Each sequence of the batch alone, for the batch's bits to be checked against.
  std::vector<float> alone;
  for (const CpuSequence& seq : sequences) {
    auto logits = cpu_forward(m.shape(), m.weights(), **l1, seq.tokens, seq.slots, seq.first_new);
    if (!logits) return report_error("bench cpu", logits.status());
    alone.insert(alone.end(), logits->begin(), logits->end());
  }
  set_parallel_threads(before);
  const bool batch_is_alone = decode_batch.one.results == alone;

  if (f.json) {
    nlohmann::json out = {{"model", f.model},
                          {"threads", threads},
                          {"batch_same_as_alone", batch_is_alone},
                          {"machine_speedup", machine.speedup()},
                          {"memory_speedup", memory.speedup()}};
    for (const Row& r : rows)
      out["rows"].push_back({{"what", r.what},
                             {"tokens", r.tokens},
                             {"one_thread_seconds", r.one_seconds()},
                             {"threads_seconds", r.many_seconds()},
                             {"speedup", r.speedup()},
                             {"speedup_over_machine", r.speedup() / machine.speedup()},
                             {"one_thread_rounds_seconds", r.one.seconds},
                             {"threads_rounds_seconds", r.many.seconds},
                             {"same_logits", r.one.results == r.many.results}});
    std::cout << out.dump(2) << '\n';
  } else {
    Table t({"", "tokens", "1 thread ms", std::to_string(threads) + " threads ms", "speedup", "÷ machine's",
             "same bits"});
    for (const Row& r : rows)
      t.add_row({r.what, r.tokens > 0 ? std::to_string(r.tokens) : "-", format_fixed(r.one_seconds() * 1e3, 2),
                 format_fixed(r.many_seconds() * 1e3, 2), format_fixed(r.speedup(), 2) + "x",
                 format_fixed(r.speedup() / machine.speedup(), 2), r.one.results == r.many.results ? "yes" : "NO"});
    t.print(std::cout);
  }
  for (const Row& r : rows)
    if (r.one.results != r.many.results) {
      std::cerr << "hiq bench cpu: error: " << r.what << " results differ between 1 and " << threads << " threads\n";
      return 1;
    }
  if (!batch_is_alone) {
    std::cerr << "hiq bench cpu: error: the decode batch's logits differ from its sequences' run one at a time\n";
    return 1;
  }
  return 0;
}

}  // namespace

std::function<int()> add_bench_cpu_command(CLI::App& bench) {
  auto f = std::make_shared<CpuBenchFlags>();
  CLI::App* app = bench.add_subcommand(
      "cpu", "CPU forward pass: N threads against one (prefill, decode step, decode batch), and the machine's ceiling");
  app->add_option("--model", f->model, "Model directory (config.json and *.safetensors)")->capture_default_str();
  app->add_option("--threads", f->threads, "Threads to compare with one (0: every hardware thread)")
      ->capture_default_str();
  app->add_option("--prefill", f->prefill, "Prompt tokens of the prefill row")->capture_default_str();
  app->add_option("--decode-context", f->decode_context, "Context tokens of the decode step")->capture_default_str();
  app->add_option("--decode-batch", f->decode_batch, "Sequences of the decode batch row (one pass, a shared context)")
      ->capture_default_str();
  app->add_option("--seconds", f->seconds, "Time each row about this long (one thread and N in turns)")
      ->capture_default_str();
  app->add_flag("--json", f->json, "Print JSON");
  return [f, app] { return app->parsed() ? run_cpu_bench(*f) : -1; };
}

}  // namespace hiq::cli
