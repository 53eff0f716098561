// cache/radix_cache.h — the hierarchical prefix cache: a radix tree over token
// sequences whose nodes hold KV in L1 (device slots), in L2 (host records), or
// both.
//
// Design. Each edge of the tree carries a run of tokens (a whole number of
// pages) and, for those tokens, up to two slot vectors: `l1` in the device pool
// and `l2` in the host pool. A request's prompt is matched against the tree:
// the longest cached prefix splits into a part resident in L1 (used directly)
// and a part held only in L2 (restored by `load_back` through the transfer
// engine, or recomputed). After prefill the request's KV is inserted; the write
// policy decides when a node's L1 KV is copied to L2 (backup). Under L1
// pressure the least recently (or least frequently) used unlocked L1 leaf gives
// up its L1 slots — if it has a host copy it stays in the tree as a host-only
// node, otherwise it is dropped. Under L2 pressure host-only leaves are
// dropped, least recently used first.
//
// Demotion. A precision-tiered host pool (`tiered:int8,int4h`) holds each
// node's records in one codec of a ladder. When the pool runs low, the
// least recently used host-only nodes are re-encoded one rung down
// (transfer/demotion_engine.h, on host threads) instead of being dropped,
// and the bytes they no longer need are freed; then the L2 copies of nodes
// still in L1, which nothing reads until L1 lets them go. Outside rung 0's
// band (below), a node is dropped only when no node there above the last
// rung can be demoted; the band's nodes are demoted, then dropped, only
// when nothing outside it is left. Demotion runs ahead of need:
// poll_transfers() starts it while less than demotion_watermark of the
// pool is free, so an allocation rarely waits. A backup that needs room at
// once asks at its rung without waiting: demotions outside the band are
// topped up to the room it needs, and the last rung's least recently used
// nodes outside the band are dropped only when those demotions cannot free
// it (a rung-0 backup may so drop a cold last-rung node although the last
// rung had room for the new one: outside the band, hits are not expected),
// and only once the band's estimate has settled (band_settled) or the tier
// could not hold every token even at the last rung; before, the band
// itself is demoted. Then it asks at the last rung, then waits for the
// oldest demotion: demote before drop, even at the cost of a wait. (A
// demotion of a 2,048-token node takes the GPU about 20 ms and a host
// thread about 0.2 s, and the cache runs on the scheduler's thread: a wait
// stalls every request, a drop costs a prefix's hits.) It starts more
// demotions and waits for the first when none is under way, and drops only
// when none is left.
//
// Rung 0's band. Which nodes deserve rung 0 follows from where the
// tier's hits land. Each host hit has a reuse distance: the rung-0 bytes
// of every L2 node used since the hit node's previous access, itself
// included (what a pool of rung 0 alone would have to hold to hit it).
// The band is the most recently used stretch of L2, `band` rung-0 bytes
// long, kept at rung 0; what lies beyond it goes down the ladder. The
// band's length comes from the last reuse_window hits: the longest of
// their distances that still leaves the lower rungs room to reach
// reuse_headroom × the farthest of them —
//
//   band + (capacity − band) / r  ≥  headroom · (1 + 1/k) · max distance,
//   r = last rung's bytes per token / rung 0's, k = hits in the window
//
// (the farthest of k hits seen underestimates the farthest there is), so
// a ladder does not trade a hit it can see for rung 0's precision. When
// the hits fit rung 0 (a working set within its capacity) the band
// covers them and the tier serves them at rung 0, as rung 0 alone would;
// when they lie farther back than any band could reach, the band is
// empty and the tier holds what the last rung alone would. The headroom
// is what lets the band shrink again: a hit beyond the lower rungs'
// reach is never seen (it was dropped), so the reach must exceed what
// is seen. Until a hit is seen nothing is known, and the band is empty.
//
// A backup is written at rung 0 when it lies in the band (it is the most
// recently used node, so when the band is at least its size); with no
// band known, when the room is free. Otherwise it is written at the last
// rung directly: it would only be demoted there, and encoding L1's KV
// straight to the last rung rounds it once, not twice. Room is made
// outside the band first — its nodes demoted, least recently used
// first, then those at the last rung dropped — and only then inside it
// (demoted, then dropped): a new prefix in the band is not sent to the
// last rung while nodes above the last rung outside it can make room.
//
// A node keeps its rung until it leaves L2: a hit restores it from its
// records (a prefix may span nodes of several rungs; the engines decode each
// slot with its rung's codec), and its L1 copy is then that codec's round
// trip, so backing it up again at rung 0 would spend bytes on no precision.
// Only KV computed anew (after the node was dropped) is backed up again, at
// the rung backup_rung() picks.
//
// Node states (of the tokens on one edge):
//
//   state        l1     l2     transfer in flight   how it is left
//   device       valid  —      none                 backup → backing-up; evict → dropped
//   backing-up   valid  alloc  backup               completes → both; fails → device
//   both         valid  valid  none                 evict L1 → host
//   host         —      valid  none                 load_back → loading; evict L2 → dropped
//   loading      alloc  valid  load                 completes → both; fails → host
//   demoting     any    valid  demotion             completes → same, one rung down; fails → as it was
//
// A demoting node's records are being rewritten in place: it is neither
// restored (load_back waits for its demotion first), nor evicted from L2,
// nor handed to the storage tier; it may meanwhile gain an L1 copy (insert).
//
// Invariants (checked by check_invariants(), after every step of the
// randomised tests):
//   1. l1 and l2 are empty or exactly as long as the edge's tokens; a non-root
//      node has at least one of them.
//   2. Below a node that has no L1 slots, no node has L1 slots: a path is L1
//      from the root down, then host-only.
//   3. A node with a transfer in flight is not evicted (splitting it shares the
//      transfer between the halves): eviction waits for the transfer when it
//      must. Nor is a node whose L1 slots a request has locked (lock counts are
//      balanced).
//   4. Every slot of either pool is owned by exactly one node, or by a request,
//      or is free.
//
// Not thread-safe: the scheduler drives it from one thread. The transfer
// engine works on its own threads and reports back through poll_transfers().
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "memory/device_kv_pool.h"
#include "memory/host_kv_pool.h"
#include "transfer/demotion_engine.h"
#include "transfer/transfer_engine.h"

namespace hiq {

using TokenId = int32_t;

enum class WritePolicy : uint8_t {
  kWriteThrough,           // back up every node when it is inserted
  kWriteThroughSelective,  // back up a node once it has been hit `write_through_threshold` times
  kWriteBack,              // back up a node only when L1 evicts it
};
std::string_view write_policy_name(WritePolicy policy);
// SGLang's spellings: write_through, write_through_selective, write_back.
Result<WritePolicy> parse_write_policy(std::string_view name);

enum class EvictionPolicy : uint8_t { kLru, kLfu };

struct RadixCacheOptions {
  WritePolicy write_policy = WritePolicy::kWriteThrough;  // --hicache-write-policy
  int write_through_threshold = 2;                         // hits before a selective backup
  EvictionPolicy eviction = EvictionPolicy::kLru;          // L1 victims; L2 is always LRU
  size_t load_back_min_tokens = 1;                         // shorter host-only matches are recomputed
  // A tiered host pool only:
  int demotion_threads = 4;          // host threads that re-encode cold nodes (0: inline, for tests)
  DemotionBackend demotion_backend;  // what they run; empty: the CPU codecs (a CUDA server: the GPU's)
  double demotion_watermark = 1.0 / 16;  // demote ahead while less than this fraction of L2 is free
  size_t reuse_window = 256;             // host hits whose reuse distances size rung 0's band
  double reuse_headroom = 1.25;          // the lower rungs reach this far past the farthest of them
  std::function<Status(Ticket)> demotion_hook;  // test hook: DemotionEngineOptions::before_job
};

inline constexpr int kMaxHostRungs = 4;

struct RadixCacheStats {
  uint64_t match_calls = 0, match_tokens = 0;         // prompts looked up, and their tokens
  uint64_t hit_tokens_l1 = 0, hit_tokens_l2 = 0;      // matched tokens resident in L1 / only in L2
  uint64_t inserted_tokens = 0;                       // new tokens the tree took over
  uint64_t backup_tokens = 0, backup_failures = 0;    // backups completed / failed
  uint64_t backup_skipped_tokens = 0;                 // no L2 room even after L2 eviction
  uint64_t load_back_tokens = 0, load_back_failures = 0;
  uint64_t l1_evicted_to_host_tokens = 0;             // L1 slots freed, host copy kept
  uint64_t l1_dropped_tokens = 0;                     // evicted from L1 with no host copy
  uint64_t l2_evicted_tokens = 0;
  // Transfers L1 eviction waited for (a backup reading, or a restore writing,
  // slots it had to free; write-back's backups), and the tokens they carried.
  uint64_t l1_eviction_waits = 0, l1_eviction_wait_tokens = 0;
  // KV inserted host-only from outside (insert_host: the storage tier), and
  // the tokens of it the tree already held (their slots freed or adopted).
  uint64_t host_inserted_tokens = 0, host_insert_duplicate_tokens = 0;
  // Tiered host pools: tokens restored from each rung; tokens backed up at
  // each; tokens demoted to each (index 0 unused); allocations that waited
  // for demotion; failed demotions (nothing changed).
  uint64_t load_back_rung_tokens[kMaxHostRungs] = {};
  uint64_t backup_rung_tokens[kMaxHostRungs] = {};  // backups written at each rung (outside rung 0's band: the last)
  uint64_t demoted_tokens[kMaxHostRungs] = {};
  uint64_t demotion_waits = 0, demotion_failures = 0;
  // Demotions taken back before a worker started them, because their node
  // was to be restored or dropped (it stays at its rung).
  uint64_t demotions_taken_back = 0;
  // L2 allocations that found the free granules enough for their tokens but
  // in runs too short for one, and the tokens those allocations dropped. Only
  // a ladder's pool fragments: its rungs' tokens take different numbers of
  // granules; a pool of one codec gives each token one.
  uint64_t fragmented_allocations = 0, fragmentation_dropped_tokens = 0;
};

class RadixCache;
struct RadixNode;

// Keeps a node's L1 KV (and that of its ancestors) from being evicted while a
// request reads it. Movable; releases on destruction. Must not outlive the cache.
class CacheLock {
 public:
  CacheLock() = default;
  ~CacheLock() { release(); }
  CacheLock(CacheLock&& other) noexcept;
  CacheLock& operator=(CacheLock&& other) noexcept;
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;

  void release();
  bool held() const { return node_ != nullptr; }

 private:
  friend class RadixCache;
  CacheLock(RadixCache* cache, RadixNode* node) : cache_(cache), node_(node) {}
  RadixCache* cache_ = nullptr;
  RadixNode* node_ = nullptr;
};

struct PrefixMatch {
  std::vector<SlotId> l1_slots;    // KV of the first l1_slots.size() tokens, usable now
  size_t host_tokens = 0;          // the next tokens are cached in L2 only (restore with load_back)
  RadixNode* l1_node = nullptr;    // deepest node of the L1 part (the root when none); lock it to use the slots
  RadixNode* host_node = nullptr;  // deepest node of the host part, or null
  size_t total_tokens() const { return l1_slots.size() + host_tokens; }
};

struct CachedPrefix {
  size_t l1 = 0;    // tokens resident in L1, from the first
  size_t host = 0;  // the next tokens, cached in L2 only
  size_t total() const { return l1 + host; }
};

struct LoadBack {
  Ticket ticket = 0;               // wait on it (per layer) before reading the restored slots
  std::vector<SlotId> l1_slots;    // the restored tokens' new L1 slots, in token order
  RadixNode* node = nullptr;       // deepest restored node: lock it, then its slots are safe to read
};

class RadixCache {
 public:
  // `l2` and `engine` may be null: a cache without a host tier.
  RadixCache(DeviceKvPool& l1, HostKvPool* l2, TransferEngine* engine, RadixCacheOptions options = {});
  ~RadixCache();
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  size_t page_size() const { return page_size_; }
  const RadixCacheOptions& options() const { return options_; }

  // The longest cached prefix of `tokens`, in whole pages. Counts a hit on
  // every matched node and refreshes its access time.
  PrefixMatch match_prefix(std::span<const TokenId> tokens);
  // What match_prefix would find (its L1 and host parts), without its
  // effects: no split, no hit counted, no access time refreshed.
  CachedPrefix cached_prefix(std::span<const TokenId> tokens) const;

  // Restores the host part of `match` into newly allocated L1 slots (evicting
  // from L1 if needed) in one transfer. kFailedPrecondition when there is no
  // host part or it is shorter than load_back_min_tokens; kResourceExhausted
  // when L1 cannot make room (lock the match's l1_node first, so the L1 part
  // cannot be the victim). On any error nothing changes: recompute instead.
  Result<LoadBack> load_back(const PrefixMatch& match);

  // Hands the KV of `tokens` (in `l1_slots`, one per token: the slots of a
  // matched prefix as match_prefix/load_back gave them, then slots the caller
  // allocated from L1) to the tree. Only whole pages are inserted: the cache
  // takes ownership of the first floor(n / page) · page slots, frees those
  // whose tokens it already held in other slots, and returns the deepest node
  // of the inserted path (lock it to keep using the KV); the caller keeps the
  // slots of a trailing partial page. A PrefixMatch or LoadBack is valid only
  // until the next call that changes the tree.
  RadixNode* insert(std::span<const TokenId> tokens, std::span<const SlotId> l1_slots);

  // Adds host-only KV for tokens[from, from + l2_slots.size()) below the path
  // of tokens[0, from), which must still be in the tree (in any tier): the
  // records are already in `l2_slots` (e.g. fetched from storage), and the
  // cache takes the slots over. Where the tree holds some of these tokens by
  // now, its copy stays and the given slots are freed, except that a node
  // with L1 KV and no L2 copy adopts them as its L2 copy. `from` and the
  // slot count must be whole pages. Returns the tokens whose KV the tree took
  // (0 when the path of tokens[0, from) is gone: every slot is freed).
  size_t insert_host(std::span<const TokenId> tokens, size_t from, std::span<const SlotId> l2_slots);

  // Called whenever KV becomes valid in L2 through a backup, with the tokens
  // from the root to the end of the backed-up node and, for each, its L2 slot
  // (kNoSlot where that token has no valid L2 copy). The storage tier writes
  // what it can from there. Empty by default.
  static constexpr SlotId kNoSlot = UINT32_MAX;
  using BackupListener = std::function<void(std::span<const TokenId> tokens, std::span<const SlotId> l2_slots)>;
  void set_backup_listener(BackupListener listener) { backup_listener_ = std::move(listener); }
  // Called when L2 eviction is about to drop a host-only node, before its
  // slots are freed: the tokens from the root to the end of the node, their
  // L2 slots as for the backup listener, and where the node's own tokens
  // begin. The storage tier's write-back copies what it stores from there.
  using L2EvictionListener =
      std::function<void(std::span<const TokenId> tokens, std::span<const SlotId> l2_slots, size_t from)>;
  void set_l2_eviction_listener(L2EvictionListener listener) { l2_eviction_listener_ = std::move(listener); }

  CacheLock lock(RadixNode* node);
  // The L1 slots of the tokens from the root down to `node`, in token order
  // (valid while the node is locked and in L1).
  std::vector<SlotId> l1_slots_to(const RadixNode* node) const;

  // Frees at least `tokens` L1 slots by evicting unlocked leaves, if it can;
  // returns the number freed. Waits for the transfers of unlocked nodes (see
  // l1_eviction_waits) only when what is free of them does not suffice.
  size_t evict_l1(size_t tokens);
  // L1 tokens evict_l1 could free: those of every node nothing locks, whether
  // or not a transfer still pins them. O(nodes).
  size_t reclaimable_l1_tokens() const;
  // Frees at least `tokens` L2 slots by dropping unprotected host-only leaves.
  size_t evict_l2(size_t tokens);
  // `tokens` L2 slots at `rung`, making room as needed: demotion first (a
  // tiered pool), then evict_l2. kResourceExhausted when nothing more can go.
  // With may_wait false, a tiered pool's room is made only by what needs no
  // wait for a demotion under way (those finished, the last rung's drops),
  // and the allocation fails rather than wait.
  Result<std::vector<SlotId>> allocate_l2(size_t tokens, int rung = 0, bool may_wait = true);

  // Applies completed transfers (backups become valid, failed ones are undone).
  void poll_transfers();
  // Waits for every transfer the cache issued, then applies them.
  void drain_transfers();

  // Transfers (and demotions) issued by the cache and not yet settled.
  size_t transfers_in_flight() const { return inflight_.size() + demotions_.size(); }
  // A tiered pool: the length of rung 0's band in rung-0 bytes (the design
  // essay), or nullopt while no host hit has been seen.
  std::optional<uint64_t> rung0_band_bytes() const;
  // The engine that demotes for a tiered pool (null otherwise).
  const DemotionEngine* demotion_engine() const { return demoter_.get(); }
  // Number of tokens held in L1 and L2 by the tree.
  size_t l1_tokens() const { return l1_tokens_; }
  size_t l2_tokens() const { return l2_tokens_; }
  const RadixCacheStats& stats() const { return stats_; }

  // Checks the invariants of the type comment; the first violation, or OK.
  Status check_invariants() const;
  // Removes every node that nothing locks or transfers (e.g. /flush_cache).
  void clear();
  // From now on no backup starts (a server shutting down writes nothing new
  // to L2): nodes stay device-only, and L1 eviction drops them. Backups in
  // flight complete as usual.
  void stop_backups() { backups_stopped_ = true; }

 private:
  friend class CacheLock;
  void unlock(RadixNode* node);
  RadixNode* split(RadixNode* node, size_t at);
  void maybe_backup(RadixNode* node);
  void start_backup(RadixNode* node);
  void drop(RadixNode* node);
  bool l1_evictable(const RadixNode* node) const;
  void apply(const Completion& completion);
  // Ends a node's transfer: a good backup or restore makes its copy valid, a
  // failed one frees the slots it was writing.
  void settle(RadixNode* node, bool ok);
  // Waits for the transfer `node` is part of and applies it now; returns the
  // tokens that transfer carried.
  size_t settle_now(RadixNode* node);
  // Hands the path of a node just backed up to backup_listener_.
  void notify_backup(const RadixNode* node);
  // Appends the tokens and L2 slots (kNoSlot where none) of the path from
  // the root down to `node`.
  void append_path(const RadixNode* node, std::vector<TokenId>& tokens, std::vector<SlotId>& slots) const;
  // Appends one node's tokens and the L2 slots storage may read: its rung-0
  // records, kNoSlot where it has none or a demotion is rewriting them.
  void append_node(const RadixNode* node, std::vector<TokenId>& tokens, std::vector<SlotId>& slots) const;
  // evict_l1 without waiting for any transfer.
  size_t evict_l1_settled(size_t tokens);
  Result<std::vector<SlotId>> allocate_l1(size_t tokens);
  // Demotion (a tiered pool). Starts demoting the least recently used
  // eligible nodes until `bytes` will be freed; the bytes it will free.
  // Host-only nodes, then the L2 copies of L1 nodes; only those last
  // accessed before `band_start` (rung 0's band stays; kNoBand: any).
  uint64_t start_demotions(uint64_t bytes, uint64_t band_start);
  bool demotable(const RadixNode* node) const;
  void apply_demotion(Ticket ticket, const Status& status);
  // Ends the demotion of `node` before its records are read or freed: takes
  // the job back if no worker has started it (the node keeps its rung), else
  // waits for it and applies it. The tokens waited for (0: taken back).
  size_t end_demotion(RadixNode* node);
  // Applies the demotions the engine has finished; the bytes they freed.
  uint64_t apply_finished_demotions();
  // Waits for every demotion in flight and applies it; the bytes freed.
  uint64_t settle_demotions();
  // Starts demotions while less than demotion_watermark of the pool is free.
  void demote_ahead();
  // One step toward room for `tokens` at `rung` (settle, demote, or drop):
  // outside rung 0's band first; false when none is possible (or, with
  // may_wait false, none without waiting for a demotion).
  bool make_l2_room(size_t tokens, int rung, bool may_wait);
  // The rung a backup of `tokens` is written at: 0 when it lies in rung 0's
  // band (with none known, when the room is free), else the last.
  int backup_rung(size_t tokens) const;
  // Rung 0's band: nodes last accessed at or after the returned time are in
  // it, its length less `reserve` bytes (a rung-0 backup about to join it);
  // kNoBand when it holds none.
  static constexpr uint64_t kNoBand = UINT64_MAX;
  uint64_t band_from(uint64_t reserve) const;
  // Whether the band's estimate has stopped growing: half the window's hits
  // came since one was farther than every hit before it.
  bool band_settled() const;
  // Records the reuse distance of a host hit on nodes last accessed at `since`.
  void record_reuse(uint64_t since);
  // evict_l2 of the nodes at `min_rung` or below it, last accessed before
  // `band_start`.
  size_t evict_l2_from(size_t tokens, int min_rung, uint64_t band_start = kNoBand);
  uint64_t tick() { return ++clock_; }

  DeviceKvPool& l1_;
  HostKvPool* l2_;
  TransferEngine* engine_;
  RadixCacheOptions options_;
  size_t page_size_;
  std::unique_ptr<RadixNode> root_;
  std::vector<std::pair<Ticket, std::vector<RadixNode*>>> inflight_;  // transfers issued by the cache
  struct Demotion {
    Ticket ticket;
    std::vector<RadixNode*> nodes;  // one node, or the halves it was split into
    DemotionJob job;
    uint64_t frees = 0;  // bytes its completion frees
  };
  uint64_t demotion_bytes_pending() const;  // what the demotions under way will free
  std::vector<Demotion>::iterator find_demotion(const RadixNode* node);  // the one that lists `node`
  // Removes a demotion from the books: its nodes are no longer under demotion.
  Demotion close_demotion(std::vector<Demotion>::iterator it);
  std::unique_ptr<DemotionEngine> demoter_;  // a tiered pool only
  std::vector<Demotion> demotions_;
  std::deque<uint64_t> reuse_distances_;     // the last reuse_window host hits' (rung-0 bytes)
  size_t hits_since_farthest_grew_ = 0;      // host hits since one was farther than all in the window
  uint64_t demote_ahead_idle_at_ = 0;        // clock_ when demoting ahead last found nothing to demote
  size_t l1_tokens_ = 0, l2_tokens_ = 0;
  uint64_t clock_ = 0;  // logical time: the order of accesses is all LRU needs
  RadixCacheStats stats_;
  bool backups_stopped_ = false;
  BackupListener backup_listener_;
  L2EvictionListener l2_eviction_listener_;
};

}  // namespace hiq
