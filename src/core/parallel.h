// core/parallel.h — data-parallel loops on a process-wide pool of threads.
//
// parallel_for splits [0, n) into contiguous ranges and runs them on the
// pool's workers and the calling thread. It is for loops whose iterations are
// independent and whose results do not depend on the split (each index
// computed the same way whichever thread runs it), so a forward pass gives
// the same bits on 1 thread as on 16. One loop runs on the pool at a time: a
// call made while another is running — from another thread, or nested inside
// `fn` — runs on its caller alone.
#pragma once

#include <cstdint>
#include <functional>

namespace hiq {

// Threads a parallel_for uses, the caller's included (≥ 1). The default is
// the cores the process may run on (its CPU affinity), else
// std::thread::hardware_concurrency(). Waits for a loop in progress; not to
// be called from inside one, even one that runs on its caller alone.
void set_parallel_threads(int threads);
int parallel_threads();

// Calls fn(begin, end) on disjoint ranges covering [0, n), each of at least
// `grain` indices (the last may be shorter); returns when every call has
// returned. n ≤ grain, or one thread: one call, on the caller.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace hiq
