// transfer/demotion_engine.h — re-encodes host records to a smaller codec in
// place (demotion), on host threads.
//
// A precision-tiered host pool (memory/host_kv_pool.h) demotes a cold node by
// re-encoding its tokens' records from their rung to the next one down. The
// new records are smaller, so each run of the node's slots is compacted
// toward its start (HostSlotAllocator::compacted): tokens are read a chunk
// at a time into a scratch buffer, then decoded and re-encoded over their
// own old place, and no token's new records reach a token not yet read.
// This needs no free space, which is what a full tier has least of.
//
// Where the re-encoding runs is the engine's backend: by default
// demote_records() on the worker threads; a CUDA server passes the GPU's
// (transfer/cuda_demoter.h), which does the same bytes some 20× faster.
//
// Contract with the caller (the cache): while a job runs, nothing else reads
// or writes its slots' records (the node is in state "demoting": it is not
// restored, evicted, pinned or written to storage), and the slots stay
// allocated at their old rung until the caller commits the job
// (HostKvPool::shrink) after its completion. A job fails only before it
// writes anything (bad arguments, the test hook): its records are then as
// they were, still at the old rung.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "codec/codec.h"
#include "core/status.h"
#include "memory/host_kv_pool.h"
#include "transfer/transfer_engine.h"

namespace hiq {

struct DemotionJob {
  std::vector<SlotId> from;  // the tokens' slots at from_rung, in token order
  std::vector<SlotId> to;    // their slots at to_rung: HostKvPool::demoted_slots(from, …)
  int from_rung = 0, to_rung = 1;
};

struct DemotionCompletion {
  Ticket ticket = 0;
  size_t tokens = 0;
  Status status;
};

struct DemotionStats {
  uint64_t jobs = 0, tokens = 0, failed_jobs = 0;
  uint64_t cancelled_jobs = 0;  // taken back before a worker started them
  uint64_t bytes_read = 0, bytes_written = 0;  // encoded records, before and after
  double seconds = 0;                          // summed over jobs, on the workers
};

// Re-encodes one job in place, on the calling worker thread, under the
// contract above; fails only before it writes anything.
using DemotionBackend = std::function<Status(const DemotionJob&)>;

struct DemotionEngineOptions {
  int threads = 2;  // workers; 0: submit() runs the job before it returns (deterministic tests)
  CodecImpl codec_impl = CodecImpl::kAuto;
  DemotionBackend backend;  // empty: demote_records() with codec_impl
  // Test hook, run on the worker before a job; a non-OK status fails it.
  std::function<Status(Ticket)> before_job;
};

class DemotionEngine {
 public:
  // The pool must be tiered and outlive the engine.
  DemotionEngine(HostKvPool& pool, DemotionEngineOptions options);
  ~DemotionEngine();  // waits for every job
  DemotionEngine(const DemotionEngine&) = delete;
  DemotionEngine& operator=(const DemotionEngine&) = delete;

  Ticket submit(DemotionJob job);
  // Completed jobs not yet handed back, in the order they completed.
  std::vector<DemotionCompletion> poll();
  // Blocks until the job is complete; its status. kNotFound once poll() has
  // handed it back (or for a ticket never issued).
  Status wait(Ticket ticket);
  // Takes back a job no worker has started: it then never runs, has written
  // nothing, and never completes (poll() does not return it; wait(), even
  // one already blocked, answers kNotFound). False once a worker has it —
  // wait for it then — and for an unknown ticket.
  bool cancel(Ticket ticket);
  void drain();
  DemotionStats stats() const;

 private:
  struct Job {
    Ticket ticket;
    DemotionJob job;
  };
  void work();
  // Runs one job and records its completion.
  void run(const Job& job, std::vector<std::byte>& scratch);

  HostKvPool& pool_;
  const DemotionEngineOptions options_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Job> queue_;
  std::vector<DemotionCompletion> done_;  // completed, not yet polled
  std::vector<Ticket> running_;          // submitted, not yet complete
  Ticket next_ticket_ = 1;
  bool stopping_ = false;
  DemotionStats stats_;
  std::vector<std::byte> inline_scratch_;
  std::vector<std::thread> workers_;
};

// Whether `job` can be demoted in `pool`. Errors: slots of different
// lengths, rungs out of order, a layer-major pool.
Status check_demotion_job(const HostKvPool& pool, const DemotionJob& job);

// The job's tokens as maximal runs [begin, begin + count) whose old records
// are one block of memory and whose new ones are another: what a backend
// copies at once. A run's new block starts at or before its old one.
struct DemotionRun {
  size_t begin = 0, count = 0;
};
std::vector<DemotionRun> demotion_runs(const HostKvPool& pool, const DemotionJob& job);

// The job's tokens in chunks of `chunk_tokens`, in token order, each cut at
// its runs' edges: `pieces` are [begin, end) of the job's tokens whose old
// records are one block and new records another. A backend that reads a
// chunk's old records, re-encodes them and then writes its pieces' new
// records, chunk after chunk, never overwrites a record it has not read
// (a run's new records end before the old ones of its later tokens).
struct DemotionPiece {
  size_t begin = 0, end = 0;
};
struct DemotionChunk {
  size_t begin = 0, end = 0;
  std::vector<DemotionPiece> pieces;
};
std::vector<DemotionChunk> demotion_chunks(std::span<const DemotionRun> runs, size_t tokens, size_t chunk_tokens);

// Re-encodes `job` in place on this thread (the default backend, exposed
// for benchmarks). `scratch` grows as needed. Errors: check_demotion_job's.
Status demote_records(HostKvPool& pool, const DemotionJob& job, std::vector<std::byte>& scratch,
                      CodecStats* stats = nullptr, CodecImpl impl = CodecImpl::kAuto);

}  // namespace hiq
