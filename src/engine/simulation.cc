#include "engine/simulation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>

#include "memory/cuda_device_kv_pool.h"
#include "transfer/cuda_demoter.h"
#include "transfer/cuda_transfer_engine.h"

namespace hiq {
namespace {

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

// L1 of the configured backend; a CUDA failure names the flag that asked for it.
Result<std::unique_ptr<DeviceKvPool>> make_l1(const SimulationConfig& config) {
  if (config.backend == SimBackend::kCpu) return make_host_memory_device_pool(config.geometry, config.max_total_tokens);
  auto pool = make_cuda_device_kv_pool(config.geometry, config.max_total_tokens);
  if (!pool) return pool.status().with_context("--device cuda");
  return pool;
}

Result<std::unique_ptr<TransferEngine>> make_engine(const SimulationConfig& config, DeviceKvPool& l1, HostKvPool& l2) {
  TransferEngineOptions options;
  options.workers = config.transfer_workers;
  options.before_layer = config.transfer_fault;
  if (config.backend == SimBackend::kCpu) return make_cpu_transfer_engine(l1, l2, options);
  auto engine = make_cuda_transfer_engine(l1, l2, options);
  if (!engine) return engine.status().with_context("--device cuda");
  return std::unique_ptr<TransferEngine>(std::move(*engine));
}

}  // namespace

std::string_view sim_backend_name(SimBackend backend) {
  switch (backend) {
    case SimBackend::kCpu: return "cpu";
    case SimBackend::kCuda: return "cuda";
  }
  return "unknown";
}

Result<SimBackend> parse_sim_backend(std::string_view name) {
  for (SimBackend b : {SimBackend::kCpu, SimBackend::kCuda})
    if (name == sim_backend_name(b)) return b;
  return invalid_argument("--device '" + std::string(name) + "' is not one of cpu, cuda");
}

Result<SimulationReport> run_simulation(const SimulationConfig& config, std::vector<Request> requests,
                                        const std::function<void(size_t, size_t)>& progress) {
  const std::unique_ptr<RequestSource> source = make_list_source(std::move(requests));
  return run_simulation(config, *source, progress);
}

Status SimulationConfig::validate() const {
  if (max_total_tokens == 0) return invalid_argument("max_total_tokens must be positive");
  if (geometry.page_size > 0 && max_total_tokens < static_cast<size_t>(geometry.page_size))
    return invalid_argument("max_total_tokens must hold at least one page (" + std::to_string(geometry.page_size) +
                            " tokens), got " + std::to_string(max_total_tokens));
  if (max_concurrency == 0) return invalid_argument("max_concurrency must be positive");
  if (transfer_workers < 1 || transfer_workers > 256) return invalid_argument("transfer_workers must be in [1, 256]");
  if (!(client_delay_max_s >= 0) || !std::isfinite(client_delay_max_s))
    return invalid_argument("client_delay_max_s must be zero or more");
  if (!(cost.prefill_tokens_per_s > 0) || !(cost.decode_step_s > 0) || !(cost.pcie_bytes_per_s > 0) ||
      !(cost.codec_bytes_per_s > 0))
    return invalid_argument("cost must have positive rates and step time");
  if (!(cost.prefill_pair_s >= 0) || !(cost.decode_context_token_s >= 0))
    return invalid_argument("cost must have batch-dependent terms of zero or more");
  HIQ_RETURN_IF_ERROR(scheduler.validate());
  return Status::ok();
}

Result<SimulationReport> run_simulation(const SimulationConfig& config, RequestSource& source,
                                        const std::function<void(size_t, size_t)>& progress) {
  const auto wall_start = std::chrono::steady_clock::now();
  HIQ_RETURN_IF_ERROR(config.validate());
  HIQ_ASSIGN_OR_RETURN(std::unique_ptr<DeviceKvPool> l1, make_l1(config));
  std::unique_ptr<HostKvPool> l2;
  std::unique_ptr<TransferEngine> engine;
  if (config.hicache) {
    HIQ_ASSIGN_OR_RETURN(l2, HostKvPool::create(config.geometry, config.host, config.max_total_tokens));
    HIQ_ASSIGN_OR_RETURN(engine, make_engine(config, *l1, *l2));
  }
  SimRunnerOptions ro;
  ro.cost = config.cost;
  ro.verify_every_decode_row = config.verify_every_read;
  SimRunner runner(*l1, l2.get(), engine.get(), ro);
  std::shared_ptr<CudaDemoter> gpu_demoter;  // the CUDA backend's, with a ladder
  SimulationReport report;
  std::vector<double> ttfts, itls;
  std::unordered_map<uint64_t, double> last_token_at;  // per running request
  {
    // Deterministic: a tiered L2 demotes inline. On threads, which nodes a
    // demotion pass picks would depend on which earlier ones had finished;
    // either way the virtual clock does not charge demotion, which runs off
    // the critical path.
    RadixCacheOptions cache_options = config.cache;
    cache_options.demotion_threads = 0;
    // On the CUDA backend a ladder demotes on the GPU, as a CUDA server does.
    if (config.backend == SimBackend::kCuda && l2 && l2->tiered()) {
      auto made = make_cuda_demoter(*l2);
      if (!made) return made.status().with_context("--device cuda");
      gpu_demoter = std::move(*made);
      cache_options.demotion_backend = demotion_backend(gpu_demoter);
    }
    RadixCache cache(*l1, l2.get(), engine.get(), cache_options);
    Scheduler scheduler(cache, *l1, engine.get(), runner, config.scheduler);
    const size_t total = source.total();
    size_t done = 0;
    // Requests on their way: a client sends when its previous request ends
    // (or at 0), plus its delay; the scheduler sees each at the first step
    // boundary at or after that time. Equal times keep the order sent.
    std::multimap<double, Request> on_the_way;
    std::mt19937_64 delay_rng(config.client_delay_seed);
    std::uniform_real_distribution<double> delay(0.0, config.client_delay_max_s);
    const auto send = [&](Request request, double at) {
      if (config.client_delay_max_s > 0) at += delay(delay_rng);
      on_the_way.emplace(at, std::move(request));
    };
    for (size_t c = 0; c < config.max_concurrency; ++c) {
      std::optional<Request> first = source.next(nullptr, {});
      if (!first) break;
      send(std::move(*first), 0.0);
    }
    while (true) {
      // With nothing to run, the clock moves on to the next arrival.
      if (scheduler.waiting() == 0 && scheduler.running() == 0 && !on_the_way.empty())
        runner.advance_to(on_the_way.begin()->first);
      while (!on_the_way.empty() && on_the_way.begin()->first <= runner.now()) {
        auto arrival = on_the_way.extract(on_the_way.begin());
        scheduler.submit(std::move(arrival.mapped()), arrival.key());
      }
      HIQ_ASSIGN_OR_RETURN(bool busy, scheduler.step());
      // Backups settle at the end of the step that issued them (a backup of a
      // prefill's new KV takes a few ms on the wire, well inside a step), not
      // whenever a worker thread happens to finish: the run is deterministic.
      cache.drain_transfers();
      // Inter-token latency: the gap between a request's consecutive tokens.
      for (const GeneratedToken& t : scheduler.take_new_tokens()) {
        auto [it, first] = last_token_at.try_emplace(t.request, runner.now());
        if (!first) itls.push_back(runner.now() - std::exchange(it->second, runner.now()));
      }
      for (RequestResult& r : scheduler.take_finished()) {
        last_token_at.erase(r.id);
        ++done;
        if (!r.status.is_ok()) {
          ++report.rejected;
        } else {
          report.prompt_tokens += r.prompt_tokens;
          report.cached_l1_tokens += r.cached_l1_tokens;
          report.cached_l2_tokens += r.cached_l2_tokens;
          report.output_tokens += r.output.size();
          ttfts.push_back(r.ttft());
        }
        // The client sends its next request (a later round, or a new one); a
        // rejected conversation ends there.
        std::optional<Request> next =
            r.status.is_ok() ? source.next(&r.request, r.output) : source.next(nullptr, {});
        if (next) send(std::move(*next), runner.now());
        if (progress) progress(done, total);
      }
      if (!busy && scheduler.waiting() == 0 && scheduler.running() == 0 && on_the_way.empty()) break;
    }
    cache.drain_transfers();
    const RadixCacheStats& cs = cache.stats();
    report.requests = total;
    report.restored_tokens = cs.load_back_tokens;
    report.backup_tokens = cs.backup_tokens;
    report.l1_evicted_tokens = cs.l1_evicted_to_host_tokens + cs.l1_dropped_tokens;
    report.l2_evicted_tokens = cs.l2_evicted_tokens;
    report.restore_failures = cs.load_back_failures;
    report.backup_failures = cs.backup_failures;
    report.l1_eviction_waits = cs.l1_eviction_waits;
    report.l2_used_tokens = cache.l2_tokens();
    report.scheduler = scheduler.stats();
    for (int rung = 0; l2 != nullptr && l2->tiered() && rung < l2->rungs(); ++rung) {
      report.restored_rung_tokens.push_back(cs.load_back_rung_tokens[rung]);
      report.backup_rung_tokens.push_back(cs.backup_rung_tokens[rung]);
      report.demoted_rung_tokens.push_back(cs.demoted_tokens[rung]);
    }
    report.demotion_waits = cs.demotion_waits;
    report.fragmented_allocations = cs.fragmented_allocations;
    report.fragmentation_dropped_tokens = cs.fragmentation_dropped_tokens;
    if (gpu_demoter) {
      report.gpu_demotion_jobs = gpu_demoter->stats().gpu_jobs;
      report.gpu_demotion_failed_jobs = gpu_demoter->stats().host_jobs;
    }
  }
  if (l2) {
    report.l2_capacity_tokens = l2->capacity_tokens();
    const TransferStats ts = engine->stats();
    report.l2_bytes_per_token =
        ts.backup_tokens ? static_cast<double>(ts.backup_bytes) / static_cast<double>(ts.backup_tokens) : 0.0;
  }
  const auto rate = [&](uint64_t part) {
    return report.prompt_tokens ? static_cast<double>(part) / static_cast<double>(report.prompt_tokens) : 0.0;
  };
  report.hit_rate_device = rate(report.cached_l1_tokens);
  report.hit_rate_host = rate(report.cached_l2_tokens);
  report.hit_rate = rate(report.cached_l1_tokens + report.cached_l2_tokens);
  report.verified_tokens = runner.stats().verified_tokens;
  if (!ttfts.empty()) {
    double sum = 0;
    for (double t : ttfts) sum += t;
    report.ttft_mean = sum / static_cast<double>(ttfts.size());
    report.ttft_p50 = percentile(ttfts, 0.5);
    report.ttft_p99 = percentile(ttfts, 0.99);
  }
  if (!itls.empty()) {
    report.itl_p50 = percentile(itls, 0.5);
    report.itl_p99 = percentile(itls, 0.99);
    report.itl_max = *std::max_element(itls.begin(), itls.end());
  }
  report.virtual_seconds = runner.now();
  report.output_tokens_per_s =
      report.virtual_seconds > 0 ? static_cast<double>(report.output_tokens) / report.virtual_seconds : 0.0;
  report.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return report;
}

}  // namespace hiq
