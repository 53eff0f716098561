// transfer/cuda_demoter.h — demotion on the GPU: the DemotionBackend of a
// CUDA server's precision-tiered host tier.
//
// On host threads, demoting int8 → int4h re-encodes about 10,000 Qwen3-8B
// tokens a second per core (docs/benchmarks.md): under a full tier the
// backups of a busy server outrun four threads, and the cache then drops
// nodes it could have kept. The GPU does the same work in a fraction of the
// time, with the codec kernels of the transfer engine (byte-identical to
// the CPU codecs), so a job's new records are the bytes demote_records()
// writes.
//
// A job, on the calling worker thread:
//   1. a chunk of tokens' old records is copied to GPU memory (the copy
//      engines, from contiguous runs of the pool), decoded to BF16 rows and
//      re-encoded at the lower rung there, and the new records are copied
//      back into a pinned staging buffer; chunk after chunk on one
//      low-priority stream, its kernels on at most `max_blocks`
//      multiprocessors;
//   2. only once every chunk is in staging are the new records copied into
//      the pool over the old ones (a plain memcpy, which cannot fail).
// So a job whose GPU part fails has written nothing, as the engine's
// contract requires; it is then done on this host thread instead
// (demote_records), and counted (host_jobs). Concurrent calls (the engine's
// workers) each take a lane of their own: stream, GPU buffers, staging.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/status.h"
#include "memory/host_kv_pool.h"
#include "transfer/demotion_engine.h"

namespace hiq {

struct CudaDemoterOptions {
  int device = -1;            // the GPU that demotes; -1: the current one
  size_t chunk_tokens = 256;  // tokens in GPU memory at a time, per lane
  int max_blocks = 16;        // multiprocessors the kernels may occupy
  // Test hook, run before a job's GPU part: a non-OK status fails that part,
  // and the job is done on the host.
  std::function<Status()> before_gpu;
};

struct CudaDemoterStats {
  uint64_t gpu_jobs = 0;   // done on the GPU
  uint64_t host_jobs = 0;  // GPU part failed, done on the host
};

class CudaDemoter {
 public:
  virtual ~CudaDemoter() = default;
  // Demotes `job` in place (DemotionBackend's contract). Thread-safe.
  virtual Status demote(const DemotionJob& job) = 0;
  virtual CudaDemoterStats stats() const = 0;
};

// Errors: no GPU or no CUDA backend (kUnavailable), a pool that is not
// tiered or not token-major, rows too large for the kernels. The pool must
// outlive the demoter.
Result<std::shared_ptr<CudaDemoter>> make_cuda_demoter(HostKvPool& pool, CudaDemoterOptions options = {});

// The demoter as a DemotionEngine backend; the engine keeps it alive.
inline DemotionBackend demotion_backend(std::shared_ptr<CudaDemoter> demoter) {
  return [demoter = std::move(demoter)](const DemotionJob& job) { return demoter->demote(job); };
}

}  // namespace hiq
