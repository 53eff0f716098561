// engine/simulation.h — `hiq sim`: the real cache, transfer engine, codecs and
// scheduler on real bytes, driven by a workload through SimRunner's virtual
// clock. Clients run closed-loop: `max_concurrency` requests are in the system
// at once, and each finished request lets its client send the next (after a
// seeded random delay, when asked: `client_delay_max_s`). Transfers
// settle at the end of the step that issued them, so a run is deterministic:
// the same flags give the same report.
//
// Two backends: L1 in host memory with the CPU transfer engine, or L1 in GPU
// memory with the CUDA transfer engine (the codec then runs on the GPU). The
// simulated model reaches L1 only through read_rows/write_rows, so both run
// the same checks; the virtual clock does not depend on the backend.
#pragma once

#include <functional>
#include <string_view>
#include <vector>

#include "cache/radix_cache.h"
#include "engine/scheduler.h"
#include "engine/sim_runner.h"
#include "engine/workload.h"
#include "memory/host_kv_pool.h"

namespace hiq {

// Where L1 lives and which transfer engine moves KV between the tiers.
enum class SimBackend : uint8_t {
  kCpu,   // L1 in host memory, the CPU transfer engine
  kCuda,  // L1 in GPU memory, the CUDA transfer engine (kUnavailable without a GPU or the CUDA backend)
};
std::string_view sim_backend_name(SimBackend backend);  // "cpu", "cuda": the names of --device
Result<SimBackend> parse_sim_backend(std::string_view name);

struct SimulationConfig {
  SimBackend backend = SimBackend::kCpu;  // --device
  KvGeometry geometry;
  size_t max_total_tokens = 16384;  // --max-total-tokens: L1 slots
  bool hicache = true;              // false: --no-hicache, an L1-only cache
  HostKvPoolOptions host;           // --hicache-codec, --record-align, --hicache-size / --hicache-ratio
  RadixCacheOptions cache;          // --hicache-write-policy
  SchedulerOptions scheduler;
  SimCostModel cost;
  size_t max_concurrency = 8;       // --max-concurrency
  // Each client waits a random time in [0, client_delay_max_s] (uniform,
  // seeded) before each request it sends, the first one included: the
  // jitter that keeps real closed-loop clients from moving in lockstep.
  // With 0 (--client-delay-ms 0), every client sends the moment its previous
  // request ends, all of them at time 0 to begin with, and clients whose
  // requests end in the same step stay in step for the rest of the run.
  double client_delay_max_s = 0;    // --client-delay-ms, in seconds
  uint64_t client_delay_seed = 1;   // --seed
  int transfer_workers = 2;         // CPU engine threads
  // Every decode step compares every byte of every row it reads, not each
  // row's first values (SimRunnerOptions::verify_every_decode_row): for GPU
  // tests, and for small runs that want every byte; a pool in GPU memory
  // always gets it.
  bool verify_every_read = false;
  // Test hook handed to the transfer engine (fault injection); null normally.
  std::function<Status(Ticket, TransferKind, int layer)> transfer_fault;

  // Errors (kInvalidArgument) start with the field's name
  // ("max_concurrency must be ..."), which a CLI maps to its flag.
  Status validate() const;
};

struct SimulationReport {
  size_t requests = 0, rejected = 0;
  uint64_t prompt_tokens = 0, cached_l1_tokens = 0, cached_l2_tokens = 0, output_tokens = 0;
  double hit_rate = 0, hit_rate_device = 0, hit_rate_host = 0;  // cached prompt tokens ÷ prompt tokens
  size_t l2_capacity_tokens = 0;
  size_t l2_used_tokens = 0;          // at the end of the run
  double l2_bytes_per_token = 0;      // measured: backup bytes ÷ backed-up tokens
  uint64_t restored_tokens = 0, backup_tokens = 0, l1_evicted_tokens = 0, l2_evicted_tokens = 0;
  uint64_t restore_failures = 0, backup_failures = 0;  // transfers that failed (their tokens were recomputed)
  uint64_t l1_eviction_waits = 0;     // transfers L1 eviction waited for (RadixCacheStats)
  // A tiered L2: per rung, tokens restored from it, backed up at it, and
  // demoted to it (rung 0's: none); allocations that waited for demotion.
  std::vector<uint64_t> restored_rung_tokens, backup_rung_tokens, demoted_rung_tokens;
  uint64_t demotion_waits = 0;
  // Allocations that found the free granules enough but their runs too short,
  // and the tokens they dropped (RadixCacheStats).
  uint64_t fragmented_allocations = 0, fragmentation_dropped_tokens = 0;
  // The CUDA backend demotes on the GPU: jobs done there, and jobs whose GPU
  // part failed and that ran on the host instead.
  uint64_t gpu_demotion_jobs = 0, gpu_demotion_failed_jobs = 0;
  uint64_t verified_tokens = 0;       // cached tokens the simulated model checked on read
  double ttft_mean = 0, ttft_p50 = 0, ttft_p99 = 0;  // seconds, virtual
  double itl_p50 = 0, itl_p99 = 0, itl_max = 0;      // seconds between a request's consecutive tokens, virtual
  double virtual_seconds = 0, output_tokens_per_s = 0;
  double wall_seconds = 0;
  SchedulerStats scheduler;           // steps (virtual seconds), queueing, admission waits
};

// Runs the requests to completion. `progress(done, total)` is called as
// requests finish (may be null). Errors: a configuration that cannot be built
// (the pools' and engines' messages: kUnavailable for kCuda without a GPU or
// the CUDA backend), or a self-check failure of the simulated model.
Result<SimulationReport> run_simulation(const SimulationConfig& config, RequestSource& source,
                                        const std::function<void(size_t, size_t)>& progress = nullptr);
// The same for a fixed list of requests, sent in order.
Result<SimulationReport> run_simulation(const SimulationConfig& config, std::vector<Request> requests,
                                        const std::function<void(size_t, size_t)>& progress = nullptr);

}  // namespace hiq
