// cache/storage_tier.h — the third tier: L2 records written to, and fetched
// from, storage that outlives the process and may be shared (storage/).
//
// Design. Storage holds KV in blocks of `block_tokens` tokens aligned to the
// start of a prompt, each block under the chained key of its tokens and the
// server's fingerprint (storage/key.h), its value the block's L2 records as
// they are: compressed, every layer, layer-major (for each layer, the K
// records of the block's tokens, then their V records).
//
// - Write, following the cache's write policy (RadixCacheOptions):
//   - write_through and write_through_selective: when a backup makes KV
//     valid in L2, every whole block of the path from the root whose tokens
//     all have valid L2 copies, and that this tier has not lately written or
//     found, is written. Its L2 slots are pinned (SlotAllocator::pin) while a
//     worker gathers their records into the value, so the cache may drop the
//     node meanwhile: the slots become free only when the copy is done.
//   - write_back: when L2 evicts a node, the blocks that end in it (and whose
//     tokens all have L2 copies) are gathered at once, before the slots are
//     freed, and stored by a worker. The copy is on the scheduler's thread:
//     that is write-back's price for freeing L2 at once. Values gathered and
//     not yet stored are bounded (write_back_staging_bytes); past that, an
//     evicted block is not written, and counted.
// - Read. start_prefetch() probes storage for the blocks of a prompt after
//   what the tree already holds (a whole block when only part of it is
//   cached). On a hit of at least the prefetch threshold, L2 slots are
//   allocated for what hit and workers fetch the values in chunks, check
//   each (header, fingerprint, key, length, checksum: a bad value ends the
//   run of hits there, is counted and removed, never served) and copy the
//   records straight into those slots; the tokens then go into the tree as
//   host-only nodes (RadixCache::insert_host), from where the request
//   restores them to L1 as any L2 hit. A failed probe or fetch is counted and
//   the prompt computed.
//
// Threads: the scheduler's thread calls everything here; storage I/O and the
// copies run on the StorageEngine's workers (or inline, in `synchronous`
// mode: the simulator and the tests, which must be deterministic). Completed
// work is applied by poll().
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/radix_cache.h"
#include "core/status.h"
#include "memory/host_kv_pool.h"
#include "storage/lru_index.h"
#include "storage/storage_backend.h"
#include "storage/storage_engine.h"
#include "storage/storage_key.h"
#include "storage/storage_options.h"

namespace hiq {

struct StorageTierOptions {
  // The prefetch policy, threshold and timeouts, and the worker threads.
  StorageOptions storage;
  size_t max_blocks_per_prefetch = 1024;                 // bounds one request's fetch
  size_t write_back_staging_bytes = size_t{256} << 20;   // write_back: values gathered, not yet stored
  // Keys written or found lately, not written again while remembered (0: as
  // many as four times the blocks L2 holds, and at least 4,096).
  size_t remembered_blocks = 0;
  bool synchronous = false;  // run storage work inline, at the call that asks for it (no threads)

  Status validate() const;
};

struct StorageTierStats {
  StorageStats io;                                  // the backend's operations, pages, bytes, seconds and errors
  uint64_t written_blocks = 0;                      // blocks stored (after backups, or at L2 eviction)
  uint64_t write_back_blocks = 0;                   // of those, gathered at L2 eviction
  uint64_t write_back_skipped_blocks = 0;           // evicted from L2 unwritten: the staging bound was reached
  uint64_t write_failures = 0;                      // batches that failed (their blocks may be written again)
  uint64_t probes = 0, probe_failures = 0;          // prompts probed
  uint64_t followed_prefetches = 0;                 // prompts that waited for another's fetch of the same blocks
  uint64_t probe_hit_blocks = 0;                    // blocks a probe found
  uint64_t fetched_blocks = 0, fetch_failures = 0;  // blocks fetched, valid and used / fetches that failed
  uint64_t inserted_tokens = 0;                     // tokens the tree took from storage
  uint64_t skipped_no_l2_room = 0;                  // hits not fetched: L2 could not make room
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

  StorageTierStats stats() const;
  const StorageFingerprint& fingerprint() const { return fingerprint_; }

 private:
  struct Pending;
  struct Prefetch;
  StorageTier(RadixCache& cache, HostKvPool& l2, std::unique_ptr<StorageBackend> backend,
              StorageFingerprint fingerprint, StorageTierOptions options);
  void on_backed_up(std::span<const TokenId> tokens, std::span<const SlotId> l2_slots);
  void on_l2_evicted(std::span<const TokenId> tokens, std::span<const SlotId> l2_slots, size_t from);
  // Starts (or, when another prefetch fetches its first block, follows) the
  // lookup of p.prompt after what the tree holds; false when there is nothing
  // worth fetching.
  bool probe(PrefetchId id, Prefetch& p);
  void apply(const StorageEngine::Completion& completion);
  // A prefetch's probe found `hits` blocks of `keys`: fetch them into L2.
  void fetch(PrefetchId id, Prefetch& p, std::vector<StorageKey> keys);
  // Applies the last chunk of p's fetch, then lets its followers look again.
  void finish_fetch(PrefetchId id, Prefetch& p);
  void finish(PrefetchId id);
  // Whether a block should be written: all its tokens have valid L2 copies
  // (`block_slots` has no kNoSlot) and it was not lately written or found.
  bool worth_writing(const StorageKey& key, std::span<const SlotId> block_slots);
  // Whether `key` was lately written or found (and makes it recent); remember() notes it.
  bool remembered(const StorageKey& key);
  void remember(const StorageKey& key);
  size_t payload_bytes() const;

  RadixCache& cache_;
  HostKvPool& l2_;
  StorageFingerprint fingerprint_;
  StorageTierOptions options_;
  size_t block_tokens_;  // the fingerprint's
  LruIndex<char> remembered_;  // keys written or found: not written again
  size_t max_remembered_;
  std::unordered_map<PrefetchId, std::unique_ptr<Prefetch>> prefetches_;
  std::unordered_map<StorageKey, PrefetchId, StorageKeyHash> fetching_;  // first block → the prefetch fetching it
  std::unordered_map<StorageEngine::Ticket, Pending> pending_;           // submitted, not yet applied
  PrefetchId next_prefetch_ = 1;
  size_t write_back_staged_ = 0;  // bytes of write-back values not yet stored
  bool closing_ = false;          // in the destructor
  StorageTierStats stats_;        // all but io, which is the engine's
  std::unique_ptr<StorageEngine> engine_;  // last: its workers stop first
};

}  // namespace hiq
