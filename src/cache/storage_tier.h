// cache/storage_tier.h — the third tier: L2 records written to, and fetched
// from, storage that outlives the process and may be shared (storage/).
//
// Design. Storage holds KV in blocks of `block_tokens` tokens aligned to the
// start of a prompt, each block under the chained key of its tokens and the
// server's fingerprint (storage/key.h), its value the block's L2 records as
// they are: compressed, every layer, layer-major (for each layer, the K
// records of the block's tokens, then their V records).
//
// - Write. When a backup makes KV valid in L2, every whole block of the path
//   from the root whose tokens all have valid L2 copies, and that this tier
//   has not yet written or found, is written. The L2 slots are pinned
//   (SlotAllocator::pin) while a worker thread copies their records out, so
//   the cache may drop the node meanwhile: the slots become free only when the
//   copy is done. Written with every write policy: L3 is written through from
//   L2, whatever decides when L2 is written.
// - Read. start_prefetch() probes storage for the blocks of a prompt after
//   what the tree already holds (a whole block when only part of it is
//   cached). On a hit of at least the prefetch threshold, L2 slots are
//   allocated for what hit and a worker fetches the values, checks each
//   (header, fingerprint, key, length, checksum: a bad value ends the run of
//   hits there and is counted, never served) and writes the records straight
//   into those slots; the tokens then go into the tree as host-only nodes
//   (RadixCache::insert_host), from where the request restores them to L1 as
//   any L2 hit. A failed probe or fetch is counted and the prompt computed.
//
// Threads: the scheduler's thread calls everything here; storage I/O and the
// copies run on worker threads (or inline, in `synchronous` mode: the
// simulator and the tests, which must be deterministic). Completed work is
// applied by poll().
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cache/radix_cache.h"
#include "core/status.h"
#include "memory/host_kv_pool.h"
#include "storage/storage_backend.h"
#include "storage/storage_key.h"
#include "storage/storage_options.h"

namespace hiq {

struct StorageTierOptions {
  // The prefetch policy, threshold and timeouts, and the worker threads.
  StorageOptions storage;
  size_t max_blocks_per_prefetch = 1024;  // bounds one request's fetch
  bool synchronous = false;  // run storage work inline, at the call that asks for it (no threads)

  Status validate() const;
};

struct StorageTierStats {
  uint64_t written_blocks = 0, write_failures = 0;  // blocks set in storage / batches that failed
  uint64_t probes = 0, probe_failures = 0;          // prompts probed
  uint64_t followed_prefetches = 0;                 // prompts that waited for another's fetch of the same blocks
  uint64_t probe_hit_blocks = 0;                    // blocks a probe found
  uint64_t fetched_blocks = 0, fetch_failures = 0;  // blocks fetched and valid / fetches that failed
  uint64_t corrupt_values = 0;                      // fetched values that failed their checks
  uint64_t inserted_tokens = 0;                     // tokens the tree took from storage
  uint64_t skipped_no_l2_room = 0;                  // hits not fetched: L2 could not make room
  uint64_t bytes_written = 0, bytes_read = 0;       // values, headers included
};

class StorageTier {
 public:
  using PrefetchId = uint64_t;

  // `cache` must have a host tier (`l2`); the tier registers itself as its
  // backup listener. `fingerprint` must describe this server's KV (its
  // block_tokens, whole pages of the cache, is the stored block).
  static Result<std::unique_ptr<StorageTier>> create(RadixCache& cache, HostKvPool& l2,
                                                     std::unique_ptr<StorageBackend> backend,
                                                     StorageFingerprint fingerprint, StorageTierOptions options);
  ~StorageTier();  // waits for the workers; unpins and frees what they held
  StorageTier(const StorageTier&) = delete;
  StorageTier& operator=(const StorageTier&) = delete;

  // Starts looking for `prompt`'s blocks after what the tree holds; 0 when
  // there is nothing to look for. The prompt must outlive nothing: it is copied.
  PrefetchId start_prefetch(std::span<const TokenId> prompt);
  // Whether admission should still wait for prefetch `id`, whose request
  // arrived at `arrival`, at runner time `now` (the policy's answer).
  bool should_wait(PrefetchId id, double arrival, double now) const;
  // The tokens prefetch `id` put into the tree so far.
  size_t inserted_tokens(PrefetchId id) const;
  // The request no longer waits for `id`; what it still fetches goes into the tree all the same.
  void forget(PrefetchId id);
  // Applies completed storage work (never blocks).
  void poll();
  // Blocks until some storage work completes or `seconds` pass; then polls.
  void wait_for_progress(double seconds);

  const StorageTierStats& stats() const { return stats_; }
  const StorageFingerprint& fingerprint() const { return fingerprint_; }

 private:
  struct Job;
  struct Prefetch;
  StorageTier(RadixCache& cache, HostKvPool& l2, std::unique_ptr<StorageBackend> backend,
              StorageFingerprint fingerprint, StorageTierOptions options);
  void on_backed_up(std::span<const TokenId> tokens, std::span<const SlotId> l2_slots);
  // Starts (or, when another prefetch fetches its first block, follows) the
  // lookup of p.prompt after what the tree holds; false when there is nothing
  // worth fetching.
  bool probe(PrefetchId id, Prefetch& p);
  void submit(std::unique_ptr<Job> job);
  void run(Job& job);  // on a worker (or inline)
  void apply(Job& job);
  void worker();
  size_t payload_bytes() const;

  RadixCache& cache_;
  HostKvPool& l2_;
  std::unique_ptr<StorageBackend> backend_;
  StorageFingerprint fingerprint_;
  StorageTierOptions options_;
  size_t block_tokens_;  // the fingerprint's
  std::unordered_set<StorageKey, StorageKeyHash> known_;  // keys written or found: not written again
  std::unordered_map<PrefetchId, std::unique_ptr<Prefetch>> prefetches_;
  std::unordered_map<StorageKey, PrefetchId, StorageKeyHash> fetching_;  // first block → the prefetch fetching it
  PrefetchId next_prefetch_ = 1;
  size_t in_flight_ = 0;  // jobs submitted and not applied
  bool closing_ = false;  // in the destructor
  StorageTierStats stats_;

  std::mutex mutex_;
  std::condition_variable work_ready_, work_done_;
  std::deque<std::unique_ptr<Job>> queue_, done_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace hiq
