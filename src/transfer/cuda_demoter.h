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
// A job, on the calling worker thread, a chunk of tokens at a time: the
// chunk's old records are copied to GPU memory (the copy engines, from
// contiguous runs of the pool), decoded to BF16 rows and re-encoded at the
// lower rung there, and the new records copied back into pinned staging, on
// one lowest-priority stream whose kernels take at most `max_blocks` blocks;
// once the chunk is all in staging, its new records are copied into the
// pool (a plain memcpy, which cannot fail). Chunks go in token order, and a
// run's new records end before the old ones of its tokens not yet written,
// so no chunk's records are overwritten before they are read. If the GPU
// fails at some chunk, the tokens from that chunk on still hold their old
// records, and the host finishes the job (demote_records; counted in
// host_jobs): a job never fails half done. Concurrent calls (the engine's
// workers) each take a lane of their own: stream, GPU buffers, staging, all
// of one chunk's size.
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
  int max_blocks = 16;        // blocks (a multiprocessor's worth each) the kernels may take
  // Test hook, run before each chunk (its index in the job): a non-OK status
  // fails the GPU there, and the host finishes the job.
  std::function<Status(size_t)> before_chunk;
};

struct CudaDemoterStats {
  uint64_t gpu_jobs = 0;   // done on the GPU
  uint64_t host_jobs = 0;  // the GPU failed at some chunk; the host finished them
};

class CudaDemoter {
 public:
  virtual ~CudaDemoter() = default;
  // Demotes `job` in place (DemotionBackend's contract): fails only for a
  // bad job, before writing anything. Thread-safe.
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
