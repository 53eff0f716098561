// `hiq bench storage`: L3's backends (file, redis, memory) writing and reading
// stored pages of each codec, against the raw rate of the same medium in the
// same run (storage/storage_bench.h says what each reference is).
//
// Redis: --redis-host/--redis-port name a server (keys under a prefix of this
// process, removed at the end); without them a private redis-server is
// started on a free loopback port and stopped at the end, or, with none on
// PATH, redis is skipped with a line saying so. File: --dir, by default a
// fresh temporary directory removed at the end.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/units.h"
#include "kv/model_config.h"
#include "storage/storage_bench.h"
#include "tools/hiq/commands.h"
#include "tools/hiq/flag_errors.h"
#include "tools/hiq/host_tier_flags.h"
#include "tools/hiq/list_flag.h"
#include "tools/hiq/private_redis_server.h"
#include "tools/hiq/table.h"
#include "tools/hiq/temporary_directory.h"

namespace hiq::cli {
namespace {

struct StorageBenchFlags {
  std::string model = "qwen3-8b";
  int tp = 1;
  std::string codecs = "bf16,int8,int4h";
  std::string backends = "file,redis";
  int block_tokens = 64;
  int64_t values = 0;  // 0: about 1 GB of values per codec
  int64_t batch = 8;
  int repeats = 3;
  int64_t record_align = static_cast<int64_t>(kDefaultRecordAlign);
  std::string dir;                     // "": a fresh temporary directory, removed at the end
  bool fsync = false;
  std::optional<std::string> redis_host;  // neither host nor port: a private redis-server
  std::optional<int> redis_port;
  bool json = false;
};

Result<StorageBenchOptions> build_options(const StorageBenchFlags& f) {
  StorageBenchOptions o;
  GeometryOptions go;
  go.tp_size = f.tp;
  HIQ_ASSIGN_OR_RETURN(o.geometry, resolve_model_geometry(f.model, go));
  HIQ_ASSIGN_OR_RETURN(o.codecs, parse_codec_list_flag(f.codecs, "--hicache-codec"));
  HIQ_ASSIGN_OR_RETURN(o.backends,
                       parse_list_flag_as<StorageBackendKind>(
                           f.backends, "--backends", [](const std::string& name) -> Result<StorageBackendKind> {
                             HIQ_ASSIGN_OR_RETURN(const StorageBackendKind kind, parse_storage_backend(name));
                             if (kind == StorageBackendKind::kNone)
                               return invalid_argument("'none' is not a backend to measure (file, redis, memory)");
                             return kind;
                           }));
  HIQ_ASSIGN_OR_RETURN(o.record_align, record_align_option(f.record_align));
  if (f.values < 0 || f.values > (int64_t{1} << 24))
    return invalid_argument("--values must be in [0, 16777216] (0: about 1 GB per codec)");
  if (f.batch < 1 || f.batch > 65536) return invalid_argument("--batch must be in [1, 65536]");
  o.block_tokens = f.block_tokens;
  o.values = static_cast<size_t>(f.values);
  o.batch = static_cast<size_t>(f.batch);
  o.repeats = f.repeats;
  o.directory = f.dir;
  o.fsync = f.fsync;
  if (f.redis_host) o.redis.host = *f.redis_host;
  if (f.redis_port) o.redis.port = *f.redis_port;
  o.redis.key_prefix = "hiq-bench-storage:" + std::to_string(::getpid()) + ":";
  return o;
}


int run_storage_bench_command(const StorageBenchFlags& f) {
  auto built = build_options(f);
  if (!built) return report_error("bench storage", built.status());
  StorageBenchOptions options = *std::move(built);
  const bool wants_file = std::ranges::find(options.backends, StorageBackendKind::kFile) != options.backends.end();
  const bool wants_redis = std::ranges::find(options.backends, StorageBackendKind::kRedis) != options.backends.end();
  TemporaryDirectory temporary;
  if (wants_file && options.directory.empty()) {
    auto created = TemporaryDirectory::create("hiq-bench-storage");
    if (!created) return report_error("bench storage", created.status());
    temporary = std::move(*created);
    options.directory = temporary.path();
  }
  // The options' own checks before a redis-server is started for them.
  if (Status s = options.validate(); !s.is_ok())
    return report_error("bench storage", with_flag_names(s, {{"block_tokens", "--block-tokens"},
                                                             {"repeats", "--repeats"},
                                                             {"batch", "--batch"},
                                                             {"backends", "--backends"},
                                                             {"redis storage: host", "--redis-host"},
                                                             {"redis storage: port", "--redis-port"}}));
  std::unique_ptr<PrivateRedisServer> private_redis;
  std::string redis_skipped;
  if (wants_redis && !f.redis_host && !f.redis_port) {
    const std::string binary = PrivateRedisServer::find_binary();
    if (binary.empty()) {
      redis_skipped = "no --redis-host or --redis-port given and no redis-server on PATH";
      std::erase(options.backends, StorageBackendKind::kRedis);
      std::fprintf(stderr, "hiq bench storage: skipping redis: %s\n", redis_skipped.c_str());
      if (options.backends.empty())
        return report_error("bench storage", unavailable("nothing to measure: redis was the only backend"));
    } else {
      auto started = PrivateRedisServer::start(binary);
      if (!started) return report_error("bench storage", started.status().with_context("private redis-server"));
      private_redis = *std::move(started);
      options.redis.host = "127.0.0.1";
      options.redis.port = private_redis->port();
      std::fprintf(stderr, "hiq bench storage: started %s on 127.0.0.1:%d\n", binary.c_str(), options.redis.port);
    }
  }
  const bool redis_measured =
      std::ranges::find(options.backends, StorageBackendKind::kRedis) != options.backends.end();

  auto report = run_storage_bench(options, [](const std::string& line) {
    std::fprintf(stderr, "hiq bench storage: %s\n", line.c_str());
  });
  if (!report) return report_error("bench storage", report.status());
  const StorageBenchReport& r = *report;
  const bool page_cache = r.largest_file_bytes > 0 && r.largest_file_bytes < r.memory_bytes / 2;
  const std::string redis_where = options.redis.host + ":" + std::to_string(options.redis.port);

  if (f.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const StorageBenchRow& row : r.rows)
      rows.push_back({{"backend", std::string(storage_backend_name(row.backend))},
                      {"codec", std::string(codec_name(row.codec))},
                      {"values", row.values},
                      {"value_bytes", row.value_bytes},
                      {"payload_bytes", row.payload_bytes},
                      {"bytes_per_token", row.bytes_per_token},
                      {"total_bytes", row.total_bytes()},
                      {"write_s", row.write_s},
                      {"read_s", row.read_s},
                      {"raw_write_s", row.raw_write_s},
                      {"raw_read_s", row.raw_read_s},
                      {"encode_s", row.encode_s},
                      {"decode_s", row.decode_s},
                      {"write_gbps", gbps(row.total_bytes(), row.write_s)},
                      {"read_gbps", gbps(row.total_bytes(), row.read_s)},
                      {"raw_write_gbps", gbps(row.total_bytes(), row.raw_write_s)},
                      {"raw_read_gbps", gbps(row.total_bytes(), row.raw_read_s)},
                      {"write_vs_raw", ratio(row.raw_write_s, row.write_s)},
                      {"read_vs_raw", ratio(row.raw_read_s, row.read_s)},
                      {"tokens_per_s", row.tokens_per_s(options.block_tokens)},
                      {"reference", std::string(storage_bench_reference(row.backend))}});
    nlohmann::json out = {{"model", options.geometry.name},
                          {"tp", f.tp},
                          {"block_tokens", options.block_tokens},
                          {"batch", options.batch},
                          {"repeats", options.repeats},
                          {"record_align", options.record_align},
                          {"fsync", options.fsync},
                          {"memory_bytes", r.memory_bytes},
                          {"largest_file_bytes", r.largest_file_bytes},
                          {"file_reads_from_page_cache", page_cache},
                          {"skipped", nlohmann::json::array()},
                          {"rows", rows}};
    if (redis_measured)
      out["redis"] = {{"endpoint", redis_where}, {"version", r.redis_version}, {"private", private_redis != nullptr}};
    if (!redis_skipped.empty()) out["skipped"].push_back({{"backend", "redis"}, {"reason", redis_skipped}});
    std::cout << out.dump(2) << '\n';
    return 0;
  }

  std::cout << "hiq bench storage: " << options.geometry.name << ", " << options.block_tokens
            << "-token blocks, batches of " << options.batch << ", median of " << options.repeats
            << " run(s), one calling thread\n";
  for (StorageBackendKind backend : options.backends) {
    std::cout << "  " << storage_backend_name(backend) << " reference: " << storage_bench_reference(backend) << '\n';
  }
  if (r.largest_file_bytes > 0)
    std::cout << "  file: " << (options.fsync ? "fsync on every value; " : "no fsync; ")
              << (page_cache ? "reads come from the page cache (nothing is dropped): "
                             : "reads may partly come from the disk: ")
              << format_bytes(r.largest_file_bytes) << " on disk at most, " << format_bytes(r.memory_bytes)
              << " of memory\n";
  if (redis_measured)
    std::cout << "  redis: " << (private_redis ? "private redis-server " : "redis-server ") << r.redis_version
              << " on " << redis_where << (options.redis.host == "127.0.0.1" ? " (loopback)" : "") << '\n';
  if (!redis_skipped.empty()) std::cout << "  redis: skipped (" << redis_skipped << ")\n";
  std::cout << "  write: set() of encoded values (encoding timed apart); read: get() + decode_value of each\n\n";
  Table t({"backend", "codec", "value", "values", "write GB/s", "raw GB/s", "vs raw", "read GB/s", "raw GB/s",
           "vs raw", "tokens/s fetched"});
  for (const StorageBenchRow& row : r.rows)
    t.add_row({std::string(storage_backend_name(row.backend)), std::string(codec_name(row.codec)),
               format_bytes(row.value_bytes), std::to_string(row.values),
               format_fixed(gbps(row.total_bytes(), row.write_s), 2),
               format_fixed(gbps(row.total_bytes(), row.raw_write_s), 2),
               format_fixed(100 * ratio(row.raw_write_s, row.write_s), 0) + " %",
               format_fixed(gbps(row.total_bytes(), row.read_s), 2),
               format_fixed(gbps(row.total_bytes(), row.raw_read_s), 2),
               format_fixed(100 * ratio(row.raw_read_s, row.read_s), 0) + " %",
               format_count(static_cast<uint64_t>(row.tokens_per_s(options.block_tokens)))});
  t.print(std::cout);
  return 0;
}

}  // namespace

std::function<int()> add_bench_storage_command(CLI::App& bench) {
  auto f = std::make_shared<StorageBenchFlags>();
  CLI::App* app = bench.add_subcommand(
      "storage", "L3 backends: write/read GB/s of stored pages vs raw file I/O, raw Redis, memcpy; tokens/s fetched");
  app->add_option("--model", f->model, "Model preset or config.json")->capture_default_str();
  app->add_option("--tp", f->tp, "Tensor-parallel ranks (KV heads per rank)")->capture_default_str();
  app->add_option("--hicache-codec", f->codecs, "Comma-separated codecs: one value size each")->capture_default_str();
  app->add_option("--backends", f->backends, "Comma-separated backends: file, redis, memory")->capture_default_str();
  app->add_option("--block-tokens", f->block_tokens, "Tokens per stored page")->capture_default_str();
  app->add_option("--values", f->values, "Values per codec (0: about 1 GB per codec)")->capture_default_str();
  app->add_option("--batch", f->batch, "Values per set()/get() call and per reference pipeline")
      ->capture_default_str();
  app->add_option("--repeats", f->repeats, "Runs of each measurement; the median is reported")->capture_default_str();
  app->add_option("--record-align", f->record_align, "L2 record alignment in bytes")->capture_default_str();
  app->add_option("--dir", f->dir, "File backend's directory (default: a temporary one, removed at the end)");
  app->add_flag("--fsync", f->fsync, "fsync every value (the file backend and its reference)");
  app->add_option("--redis-host", f->redis_host, "Redis server to measure (default: a private redis-server)");
  app->add_option("--redis-port", f->redis_port, "Its port (default 6379 when --redis-host is given)");
  app->add_flag("--json", f->json, "Print JSON");
  return [f, app] { return app->parsed() ? run_storage_bench_command(*f) : -1; };
}

}  // namespace hiq::cli
