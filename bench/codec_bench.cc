// CPU codec throughput at the Qwen3-8B row shape (8 KV heads × 128), one core,
// reported as GB/s of BF16 data, next to a memcpy of the same BF16 bytes in the
// same run. Two batch sizes: 256 rows (512 KB of BF16, cache-resident) and
// 16,384 rows (32 MB, from DRAM).
//
//   build/release/bench/hiq_codec_bench [--benchmark_filter=…] [--benchmark_min_time=…]
//
// After Google Benchmark's own report it prints a summary: each codec's speed
// as a percentage of memcpy at the same batch size. `transcode/FROM>TO` is
// demotion's re-encoding (decode FROM, encode TO, row by row), in the same
// units: GB/s of the BF16 rows it passes through.
#include <benchmark/benchmark.h>

#include <cstring>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "codec/codec.h"
#include "codec/numeric.h"

namespace hiq {
namespace {

constexpr RowShape kRow{8, 128};

std::vector<uint16_t> gaussian_rows(size_t rows) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> out(rows * kRow.elements());
  for (auto& v : out) v = numeric::float_to_bf16(normal(rng));
  return out;
}

void set_bf16_bytes(benchmark::State& state, size_t rows) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(rows * kRow.elements() * 2));
}

void BM_Memcpy(benchmark::State& state) {
  const auto rows = static_cast<size_t>(state.range(0));
  const auto src = gaussian_rows(rows);
  std::vector<uint16_t> dst(src.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size() * 2);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_bf16_bytes(state, rows);
}

void BM_Encode(benchmark::State& state, CodecKind codec, CodecImpl impl) {
  if (!codec_impl_supported(impl)) return state.SkipWithError("implementation not supported on this CPU");
  const auto rows = static_cast<size_t>(state.range(0));
  const RecordLayout layout = *RecordLayout::make(codec, kRow);
  const auto src = gaussian_rows(rows);
  std::vector<std::byte> records(layout.record_bytes * rows);
  for (auto _ : state) {
    encode_rows(layout, src.data(), kRow.elements(), rows, records.data(), nullptr, impl);
    benchmark::DoNotOptimize(records.data());
    benchmark::ClobberMemory();
  }
  set_bf16_bytes(state, rows);
}

void BM_Decode(benchmark::State& state, CodecKind codec, CodecImpl impl) {
  if (!codec_impl_supported(impl)) return state.SkipWithError("implementation not supported on this CPU");
  const auto rows = static_cast<size_t>(state.range(0));
  const RecordLayout layout = *RecordLayout::make(codec, kRow);
  const auto src = gaussian_rows(rows);
  std::vector<std::byte> records(layout.record_bytes * rows);
  encode_rows(layout, src.data(), kRow.elements(), rows, records.data());
  std::vector<uint16_t> dst(src.size());
  for (auto _ : state) {
    decode_rows(layout, records.data(), rows, dst.data(), kRow.elements(), impl);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_bf16_bytes(state, rows);
}

void BM_Transcode(benchmark::State& state, CodecKind from_codec, CodecKind to_codec, CodecImpl impl) {
  if (!codec_impl_supported(impl)) return state.SkipWithError("implementation not supported on this CPU");
  const auto rows = static_cast<size_t>(state.range(0));
  const RecordLayout from = *RecordLayout::make(from_codec, kRow), to = *RecordLayout::make(to_codec, kRow);
  const auto src = gaussian_rows(rows);
  std::vector<std::byte> records(from.record_bytes * rows), out(to.record_bytes * rows);
  encode_rows(from, src.data(), kRow.elements(), rows, records.data());
  for (auto _ : state) {
    transcode_rows(from, records.data(), 0, to, out.data(), 0, rows, nullptr, impl);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_bf16_bytes(state, rows);
}

// The demotions a tiered host tier makes: down a ladder of codecs.
constexpr std::pair<CodecKind, CodecKind> kDemotions[] = {{CodecKind::kInt8, CodecKind::kInt4H},
                                                          {CodecKind::kBf16, CodecKind::kInt8},
                                                          {CodecKind::kBf16, CodecKind::kInt4H},
                                                          {CodecKind::kFp8, CodecKind::kInt4H}};

std::string demotion_name(std::pair<CodecKind, CodecKind> d) {
  return std::string(codec_name(d.first)) + ">" + std::string(codec_name(d.second));
}

void register_all() {
  const std::vector<int64_t> batches = {256, 16384};
  for (int64_t rows : batches) benchmark::RegisterBenchmark("memcpy", BM_Memcpy)->Arg(rows);
  for (CodecImpl impl : {CodecImpl::kScalar, CodecImpl::kAvx2, CodecImpl::kAvx512}) {
    if (!codec_impl_supported(impl)) continue;
    for (CodecKind codec : kAllCodecs) {
      const std::string suffix = std::string(codec_name(codec)) + "/" + std::string(codec_impl_name(impl));
      for (int64_t rows : batches) {
        benchmark::RegisterBenchmark(("encode/" + suffix).c_str(), BM_Encode, codec, impl)->Arg(rows);
        benchmark::RegisterBenchmark(("decode/" + suffix).c_str(), BM_Decode, codec, impl)->Arg(rows);
      }
    }
    for (const auto& d : kDemotions)
      for (int64_t rows : batches)
        benchmark::RegisterBenchmark(("transcode/" + demotion_name(d) + "/" + std::string(codec_impl_name(impl))).c_str(),
                                     BM_Transcode, d.first, d.second, impl)
            ->Arg(rows);
  }
}

// Keeps every run's throughput so the summary can set it against memcpy.
class CollectingReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred || r.run_type != Run::RT_Iteration) continue;
      auto it = r.counters.find("bytes_per_second");
      if (it != r.counters.end()) gbps[r.benchmark_name()] = it->second.value / 1e9;
    }
  }
  std::map<std::string, double> gbps;  // "encode/int8/avx2/16384" → GB/s
};

void print_summary(const CollectingReporter& reporter) {
  std::printf("\nSummary: GB/s of BF16 data on one core; %% of memcpy of the same bytes in this run\n");
  std::printf("%-8s %-7s %-7s %18s %18s\n", "op", "codec", "impl", "256 rows", "16384 rows");
  const auto find = [&](const std::string& name) -> double {
    auto it = reporter.gbps.find(name);
    return it == reporter.gbps.end() ? 0.0 : it->second;
  };
  const double memcpy_small = find("memcpy/256"), memcpy_large = find("memcpy/16384");
  std::printf("%-8s %-7s %-7s %9.1f (100%%) %9.1f (100%%)\n", "memcpy", "-", "-", memcpy_small, memcpy_large);
  for (const char* op : {"encode", "decode"})
    for (CodecImpl impl : {CodecImpl::kScalar, CodecImpl::kAvx2, CodecImpl::kAvx512})
      for (CodecKind codec : kAllCodecs) {
        const std::string base = std::string(op) + "/" + std::string(codec_name(codec)) + "/" +
                                 std::string(codec_impl_name(impl)) + "/";
        const double small = find(base + "256"), large = find(base + "16384");
        if (small == 0 && large == 0) continue;
        std::printf("%-8s %-7s %-7s %9.1f (%3.0f%%) %9.1f (%3.0f%%)\n", op, std::string(codec_name(codec)).c_str(),
                    std::string(codec_impl_name(impl)).c_str(), small,
                    memcpy_small > 0 ? 100 * small / memcpy_small : 0.0, large,
                    memcpy_large > 0 ? 100 * large / memcpy_large : 0.0);
      }
  for (CodecImpl impl : {CodecImpl::kScalar, CodecImpl::kAvx2, CodecImpl::kAvx512})
    for (const auto& d : kDemotions) {
      const std::string base = "transcode/" + demotion_name(d) + "/" + std::string(codec_impl_name(impl)) + "/";
      const double small = find(base + "256"), large = find(base + "16384");
      if (small == 0 && large == 0) continue;
      std::printf("%-9s %-12s %-7s %9.1f (%3.0f%%) %9.1f (%3.0f%%)\n", "transcode", demotion_name(d).c_str(),
                  std::string(codec_impl_name(impl)).c_str(), small, memcpy_small > 0 ? 100 * small / memcpy_small : 0.0,
                  large, memcpy_large > 0 ? 100 * large / memcpy_large : 0.0);
    }
}

}  // namespace
}  // namespace hiq

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  hiq::register_all();
  hiq::CollectingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  hiq::print_summary(reporter);
  benchmark::Shutdown();
  return 0;
}
