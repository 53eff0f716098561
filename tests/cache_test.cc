// The radix cache: targeted behaviours (split on a partial match, duplicates
// freed on insert, L1 eviction to host and back, write policies, L2 eviction,
// locks) and a randomised model-based test: thousands of requests, evictions
// and transfers, checking after every step the tree's invariants, that no slot
// leaked, and that every slot the cache hands out holds the KV of exactly the
// right prefix (or, restored from L2, the codec's round trip of it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <random>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "cache/radix_cache.h"
#include "cache/storage_tier.h"
#include "codec/numeric.h"
#include "kv/model_config.h"
#include "storage/storage_value.h"

namespace hiq {
namespace {

KvGeometry tiny_geometry(int page_size) {
  GeometryOptions o;
  o.page_size = page_size;
  return *geometry_from_config_json(
      R"({"model_type": "qwen3", "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
          "head_dim": 16})",
      "tiny", o);
}

// Synthetic KV of the token at position p given the whole prefix: a hash of
// tokens[0..p] spread over the row. A slot restored for the wrong prefix, the
// wrong position or the wrong layer shows up as a different row.
uint64_t prefix_hash(std::span<const TokenId> tokens, size_t p) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i <= p; ++i) h = (h ^ static_cast<uint64_t>(tokens[i] + 7)) * 1099511628211ull;
  return h;
}

void expected_row(uint64_t hash, int layer, KvPart part, std::span<uint16_t> row) {
  std::mt19937 rng(static_cast<uint32_t>(hash ^ (hash >> 32)) + static_cast<uint32_t>(layer * 2 + static_cast<int>(part)));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : row) v = numeric::float_to_bf16(normal(rng));
}

struct Harness {
  explicit Harness(KvCodecs codec, int page_size, size_t l1_slots, size_t l2_slots, RadixCacheOptions options,
                   int workers = 2, RecordOrder order = RecordOrder::kLayerMajor, std::vector<CodecKind> demotion = {},
                   uint64_t l2_bytes = 0,  // non-zero: L2's budget in bytes, not l2_slots
                   size_t record_align = kDefaultRecordAlign)
      : geometry(tiny_geometry(page_size)) {
    l1 = *make_host_memory_device_pool(geometry, l1_slots);
    HostKvPoolOptions ho;
    ho.codec = codec;
    ho.record_order = order;
    ho.demotion = std::move(demotion);
    ho.ratio = static_cast<double>(l2_slots) / static_cast<double>(l1_slots);
    ho.size_bytes = l2_bytes;
    ho.record_align = record_align;
    auto pool = HostKvPool::create(geometry, ho, l1_slots);
    EXPECT_TRUE(pool.is_ok()) << pool.status().to_string();
    if (!pool) return;
    l2 = std::move(*pool);
    TransferEngineOptions eo;
    eo.workers = workers;
    engine = *make_cpu_transfer_engine(*l1, *l2, eo);
    cache = std::make_unique<RadixCache>(*l1, l2.get(), engine.get(), options);
  }
  ~Harness() {
    cache.reset();  // drains its transfers before the engine goes
  }

  // Calls write(i, layer, part, row) with the KV row every token tokens[from + i], i < count, should hold.
  template <typename Write>
  void for_each_expected_row(std::span<const TokenId> tokens, size_t from, size_t count, Write write) {
    std::vector<uint16_t> row;
    for (size_t i = 0; i < count; ++i) {
      const uint64_t h = prefix_hash(tokens, from + i);
      for (int layer = 0; layer < geometry.num_layers; ++layer)
        for (KvPart part : {KvPart::kK, KvPart::kV}) {
          row.resize(l1->row_elements(part));
          expected_row(h, layer, part, row);
          write(i, layer, part, row);
        }
    }
  }

  // "Computes" the KV of tokens[from..to) into `slots`.
  void compute(std::span<const TokenId> tokens, size_t from, std::span<const SlotId> slots) {
    for_each_expected_row(tokens, from, slots.size(),
                          [&](size_t i, int layer, KvPart part, std::span<const uint16_t> row) {
                            std::memcpy(l1->row(layer, part, slots[i]), row.data(), row.size() * 2);
                          });
  }

  // The same KV, encoded into L2 records of rung 0 (as storage brings them in).
  void compute_host(std::span<const TokenId> tokens, size_t from, std::span<const SlotId> slots) {
    for_each_expected_row(tokens, from, slots.size(),
                          [&](size_t i, int layer, KvPart part, std::span<const uint16_t> row) {
                            encode_rows(l2->layout(part, 0), row.data(), row.size(), 1,
                                        l2->record(layer, part, slots[i]));
                          });
  }

  enum class Origin { kComputed, kRestored, kEither };

  // Checks that `slots` hold the KV of tokens[from..): as computed, as restored
  // from L2 (the codec's round trip of it; with a ladder, that of any rung,
  // each rung's of the one above, or the last rung's of it), or, slot by
  // slot, either.
  ::testing::AssertionResult holds(std::span<const TokenId> tokens, size_t from, std::span<const SlotId> slots,
                                   Origin origin) {
    std::vector<uint16_t> computed, restored;
    std::vector<std::byte> record(4096);
    for (size_t i = 0; i < slots.size(); ++i) {
      const uint64_t h = prefix_hash(tokens, from + i);
      for (int layer = 0; layer < geometry.num_layers; ++layer)
        for (KvPart part : {KvPart::kK, KvPart::kV}) {
          computed.resize(l1->row_elements(part));
          expected_row(h, layer, part, computed);
          const auto* actual = l1->row(layer, part, slots[i]);
          const size_t bytes = computed.size() * 2;
          const bool is_computed = std::memcmp(actual, computed.data(), bytes) == 0;
          bool is_restored = false;
          restored = computed;
          for (int rung = 0; rung < l2->rungs() && !is_restored; ++rung) {
            const RecordLayout& layout = l2->layout(part, rung);
            encode_rows(layout, restored.data(), restored.size(), 1, record.data());
            decode_rows(layout, record.data(), 1, restored.data(), restored.size());
            is_restored = std::memcmp(actual, restored.data(), bytes) == 0;
          }
          if (!is_restored && l2->tiered()) {  // backed up straight to the last rung
            const RecordLayout& layout = l2->layout(part, l2->rungs() - 1);
            encode_rows(layout, computed.data(), computed.size(), 1, record.data());
            decode_rows(layout, record.data(), 1, restored.data(), restored.size());
            is_restored = std::memcmp(actual, restored.data(), bytes) == 0;
          }
          const bool ok = origin == Origin::kComputed ? is_computed
                          : origin == Origin::kRestored ? is_restored
                                                        : is_computed || is_restored;
          if (!ok)
            return ::testing::AssertionFailure() << "slot " << slots[i] << " (token " << from + i << ", layer "
                                                 << layer << ") holds the wrong KV";
        }
    }
    return ::testing::AssertionSuccess();
  }

  KvGeometry geometry;
  std::unique_ptr<DeviceKvPool> l1;
  std::unique_ptr<HostKvPool> l2;
  std::unique_ptr<TransferEngine> engine;
  std::unique_ptr<RadixCache> cache;
};

// Serves one request the way the scheduler will: match, lock, restore the host
// part, compute the rest, insert. Returns false when L1 had no room.
bool serve(Harness& h, std::span<const TokenId> tokens, bool use_host, size_t* restored_tokens = nullptr) {
  RadixCache& cache = *h.cache;
  // The side-effect-free count the scheduler budgets with sees what the match will.
  const uint64_t match_calls = cache.stats().match_calls;
  const CachedPrefix peeked = cache.cached_prefix(tokens);
  EXPECT_EQ(cache.stats().match_calls, match_calls);
  PrefixMatch m = cache.match_prefix(tokens);
  EXPECT_EQ(peeked.l1, m.l1_slots.size());
  EXPECT_EQ(peeked.host, m.host_tokens);
  // What the match returns is still in the tree when it returns (the
  // backups it may start make room elsewhere).
  const CachedPrefix after = cache.cached_prefix(tokens);
  EXPECT_EQ(after.l1, m.l1_slots.size());
  EXPECT_EQ(after.host, m.host_tokens);
  CacheLock lock = cache.lock(m.l1_node);
  EXPECT_TRUE(h.holds(tokens, 0, m.l1_slots, Harness::Origin::kEither));
  std::vector<SlotId> slots = m.l1_slots;
  if (use_host && m.host_tokens > 0) {
    auto back = cache.load_back(m);
    if (back.is_ok()) {
      CacheLock restored_lock = cache.lock(back->node);
      for (int layer = 0; layer < h.geometry.num_layers; ++layer)
        EXPECT_TRUE(h.engine->wait_layer(back->ticket, layer).is_ok());
      EXPECT_TRUE(h.holds(tokens, slots.size(), back->l1_slots, Harness::Origin::kRestored));
      slots.insert(slots.end(), back->l1_slots.begin(), back->l1_slots.end());
      if (restored_tokens) *restored_tokens += back->l1_slots.size();
      lock = std::move(restored_lock);
    }
  }
  const size_t cached = slots.size();
  const size_t missing = tokens.size() - cached;
  if (h.l1->allocator().free_count() < missing) cache.evict_l1(missing - h.l1->allocator().free_count());
  auto fresh = h.l1->allocator().allocate(missing);
  if (!fresh) return false;
  h.compute(tokens, cached, *fresh);
  slots.insert(slots.end(), fresh->begin(), fresh->end());
  (void)cache.insert(tokens, slots);
  // A trailing partial page stays with the request: it frees it when done.
  const size_t whole = tokens.size() / cache.page_size() * cache.page_size();
  EXPECT_TRUE(h.l1->allocator().free(std::span(slots).subspan(whole)).is_ok());
  return true;
}

TEST(RadixCache, PartialMatchSplitsAndDuplicatesAreFreed) {
  RadixCacheOptions o;
  Harness h(CodecKind::kBf16, 1, 64, 64, o);
  const std::vector<TokenId> a = {1, 2, 3, 4, 5, 6}, b = {1, 2, 3, 9, 9};
  ASSERT_TRUE(serve(h, a, true));
  EXPECT_EQ(h.cache->l1_tokens(), 6u);
  ASSERT_TRUE(serve(h, b, true));
  EXPECT_EQ(h.cache->l1_tokens(), 8u);  // 1 2 3 shared, 4 5 6 and 9 9 apart
  EXPECT_EQ(h.l1->allocator().used_count(), 8u);
  const PrefixMatch m = h.cache->match_prefix(std::vector<TokenId>{1, 2, 3, 4, 7});
  EXPECT_EQ(m.l1_slots.size(), 4u);
  EXPECT_TRUE(h.holds(a, 0, m.l1_slots, Harness::Origin::kComputed));
  EXPECT_TRUE(h.cache->check_invariants().is_ok()) << h.cache->check_invariants().to_string();
}

TEST(RadixCache, EvictedLeafStaysOnHostAndComesBackIntact) {
  RadixCacheOptions o;  // write_through
  Harness h(CodecKind::kInt8, 1, 16, 64, o);
  const std::vector<TokenId> a = {5, 6, 7, 8, 9, 10, 11, 12};
  ASSERT_TRUE(serve(h, a, true));
  h.cache->drain_transfers();
  EXPECT_EQ(h.cache->l2_tokens(), 8u);
  EXPECT_EQ(h.cache->evict_l1(100), 8u);
  EXPECT_EQ(h.cache->l1_tokens(), 0u);
  EXPECT_EQ(h.cache->stats().l1_evicted_to_host_tokens, 8u);
  PrefixMatch m = h.cache->match_prefix(a);
  EXPECT_EQ(m.l1_slots.size(), 0u);
  EXPECT_EQ(m.host_tokens, 8u);
  size_t restored = 0;
  ASSERT_TRUE(serve(h, a, true, &restored));
  EXPECT_EQ(restored, 8u);
  h.cache->drain_transfers();
  EXPECT_EQ(h.cache->stats().load_back_tokens, 8u);
  EXPECT_TRUE(h.cache->check_invariants().is_ok()) << h.cache->check_invariants().to_string();
}

TEST(RadixCache, WithoutBackupEvictionDropsAndLockedNodesStay) {
  RadixCacheOptions o;
  o.write_policy = WritePolicy::kWriteThroughSelective;
  o.write_through_threshold = 100;  // never reached: nothing is backed up
  Harness h(CodecKind::kBf16, 1, 16, 16, o);
  const std::vector<TokenId> a = {1, 2, 3, 4}, b = {7, 8, 9, 10};
  ASSERT_TRUE(serve(h, a, true));
  ASSERT_TRUE(serve(h, b, true));
  PrefixMatch m = h.cache->match_prefix(a);
  CacheLock lock = h.cache->lock(m.l1_node);
  EXPECT_EQ(h.cache->evict_l1(100), 4u);  // only b: a is locked
  EXPECT_EQ(h.cache->stats().l1_dropped_tokens, 4u);
  EXPECT_EQ(h.cache->match_prefix(b).total_tokens(), 0u);
  EXPECT_EQ(h.cache->match_prefix(a).l1_slots.size(), 4u);
  lock.release();
  EXPECT_EQ(h.cache->evict_l1(100), 4u);
  EXPECT_EQ(h.l1->allocator().used_count(), 0u);
  EXPECT_TRUE(h.cache->check_invariants().is_ok());
}

TEST(RadixCache, WriteBackCopiesToHostOnlyWhenEvicting) {
  RadixCacheOptions o;
  o.write_policy = WritePolicy::kWriteBack;
  Harness h(CodecKind::kFp8, 2, 16, 32, o);
  const std::vector<TokenId> a = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(serve(h, a, true));
  h.cache->drain_transfers();
  EXPECT_EQ(h.cache->l2_tokens(), 0u);
  EXPECT_EQ(h.cache->evict_l1(100), 6u);
  EXPECT_EQ(h.cache->l2_tokens(), 6u);
  EXPECT_EQ(h.cache->stats().backup_tokens, 6u);
  EXPECT_EQ(h.cache->match_prefix(a).host_tokens, 6u);
  EXPECT_TRUE(h.cache->check_invariants().is_ok());
}

TEST(RadixCache, SelectiveWriteThroughBacksUpAfterEnoughHits) {
  RadixCacheOptions o;
  o.write_policy = WritePolicy::kWriteThroughSelective;
  o.write_through_threshold = 2;
  Harness h(CodecKind::kInt4, 1, 32, 32, o);
  const std::vector<TokenId> a = {1, 2, 3, 4};
  ASSERT_TRUE(serve(h, a, true));
  h.cache->drain_transfers();
  EXPECT_EQ(h.cache->l2_tokens(), 0u);
  (void)h.cache->match_prefix(a);  // hit 1
  h.cache->drain_transfers();
  EXPECT_EQ(h.cache->l2_tokens(), 0u);
  (void)h.cache->match_prefix(a);  // hit 2: backed up
  h.cache->drain_transfers();
  EXPECT_EQ(h.cache->l2_tokens(), 4u);
}

// A match under selective write-through backs up the L1 nodes it touched,
// and a backup makes its room in a full L2 by dropping (or demoting) host-only
// nodes nothing locks. The host part of the path being matched is such a
// node — here brought in from storage below a prefix that was never backed
// up — and the match returns it to be restored: it must still be there. (It
// was dropped, and the match and load_back read the freed node.) On one codec
// and on a ladder whose demoter has already sent it to the last rung.
TEST(RadixCache, ASelectiveBackupInAMatchDoesNotTakeTheMatchedHostPart) {
  for (const bool ladder : {false, true}) {
    SCOPED_TRACE(ladder ? "tiered:int8,int4h" : "int8");
    RadixCacheOptions o;
    o.write_policy = WritePolicy::kWriteThroughSelective;
    o.write_through_threshold = 1;
    o.demotion_threads = 0;
    o.demotion_watermark = 0.5;
    const KvGeometry g = tiny_geometry(1);
    const uint64_t int8_bytes =
        2 * g.num_layers * RecordLayout::compute(CodecKind::kInt8, {1, 16}, kDefaultRecordAlign).record_bytes;
    // L2: four tokens at int8, for the ladder too.
    const RecordOrder order = ladder ? RecordOrder::kTokenMajor : RecordOrder::kLayerMajor;
    const std::vector<CodecKind> demotion = ladder ? std::vector{CodecKind::kInt4H} : std::vector<CodecKind>{};
    Harness h(CodecKind::kInt8, 1, 32, ladder ? 0 : 4, o, 2, order, demotion, ladder ? 4 * int8_bytes : 0);
    ASSERT_TRUE(h.cache);
    const std::vector<TokenId> xy = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    ASSERT_TRUE(serve(h, std::span(xy).first(6), false));  // X: in L1, never hit, so never backed up
    h.cache->drain_transfers();
    ASSERT_EQ(h.cache->l2_tokens(), 0u);
    auto y = h.cache->allocate_l2(4);  // Y below it, as storage brings it: L2 is full
    ASSERT_TRUE(y.is_ok()) << y.status().to_string();
    h.compute_host(xy, 6, *y);
    ASSERT_EQ(h.cache->insert_host(xy, 6, *y), 4u);
    if (ladder) {  // demoting ahead sends Y to the last rung
      h.cache->poll_transfers();
      h.cache->drain_transfers();
      ASSERT_EQ(h.cache->stats().demoted_tokens[1], 4u);
    }
    const PrefixMatch m = h.cache->match_prefix(xy);  // X's first hit: its backup is due, and has no room
    EXPECT_EQ(m.l1_slots.size(), 6u);
    ASSERT_EQ(m.host_tokens, 4u);
    EXPECT_EQ(h.cache->cached_prefix(xy).host, 4u) << "the match's own host part was dropped";
    EXPECT_EQ(h.cache->stats().l2_evicted_tokens, 0u);
    EXPECT_TRUE(h.cache->check_invariants().is_ok()) << h.cache->check_invariants().to_string();
    h.cache->drain_transfers();
    size_t restored = 0;
    ASSERT_TRUE(serve(h, xy, true, &restored));  // and it restores Y's KV
    EXPECT_EQ(restored, 4u);
    h.cache->drain_transfers();
    EXPECT_TRUE(h.cache->check_invariants().is_ok()) << h.cache->check_invariants().to_string();
  }
}

TEST(RadixCache, HostTierFullEvictsLeastRecentlyUsedHostLeaves) {
  RadixCacheOptions o;
  Harness h(CodecKind::kInt8, 1, 8, 8, o);  // L2 holds 8 tokens
  const std::vector<TokenId> a = {1, 1, 1, 1}, b = {2, 2, 2, 2}, c = {3, 3, 3, 3};
  for (const auto* seq : {&a, &b}) {
    ASSERT_TRUE(serve(h, *seq, true));
    h.cache->drain_transfers();
    h.cache->evict_l1(100);
  }
  EXPECT_EQ(h.cache->l2_tokens(), 8u);
  (void)h.cache->match_prefix(b);  // b is now more recent than a
  ASSERT_TRUE(serve(h, c, true));  // its backup needs room: a goes
  h.cache->drain_transfers();
  EXPECT_EQ(h.cache->match_prefix(a).total_tokens(), 0u);
  EXPECT_EQ(h.cache->match_prefix(b).host_tokens, 4u);
  EXPECT_EQ(h.cache->stats().l2_evicted_tokens, 4u);
  EXPECT_TRUE(h.cache->check_invariants().is_ok());
}

TEST(RadixCache, FailedRestoreLeavesTheNodeOnHostAndIsCounted) {
  RadixCacheOptions o;
  KvGeometry g = tiny_geometry(1);
  auto l1 = *make_host_memory_device_pool(g, 16);
  HostKvPoolOptions ho;
  ho.codec = CodecKind::kInt8;
  ho.ratio = 2;
  auto l2 = *HostKvPool::create(g, ho, 16);
  TransferEngineOptions eo;
  eo.before_layer = [](Ticket, TransferKind kind, int layer) {
    return kind == TransferKind::kLoad && layer == 1 ? data_loss("injected") : Status::ok();
  };
  auto engine = *make_cpu_transfer_engine(*l1, *l2, eo);
  RadixCache cache(*l1, l2.get(), engine.get(), o);
  const std::vector<TokenId> a = {4, 3, 2, 1};
  auto slots = *l1->allocator().allocate(4);
  (void)cache.insert(a, slots);
  cache.drain_transfers();
  cache.evict_l1(100);
  PrefixMatch m = cache.match_prefix(a);
  auto back = cache.load_back(m);
  ASSERT_TRUE(back.is_ok());
  EXPECT_FALSE(engine->wait(back->ticket).is_ok());
  cache.poll_transfers();
  EXPECT_EQ(cache.stats().load_back_failures, 1u);
  EXPECT_EQ(cache.l1_tokens(), 0u);
  EXPECT_EQ(l1->allocator().used_count(), 0u) << "the restore's L1 slots are freed";
  EXPECT_EQ(cache.match_prefix(a).host_tokens, 4u) << "the host copy is still good";
  EXPECT_TRUE(cache.check_invariants().is_ok());
}

// ---- a ladder's rung-0 band ------------------------------------------------------------

// A served prefix reused `lag` prefixes later, as hiq quality's workload
// mode drives a tier: each step computes and backs up a new prefix, leaves
// it host-only, then restores the one `lag` steps back. A restored prefix
// is never read again, yet it is the most recently used.
struct LagRun {
  size_t restored[2] = {}, missed = 0;
  RadixCacheStats stats;
  std::optional<uint64_t> band;  // rung 0's band at the end (a ladder)
  uint64_t int8_prefix_bytes = 0;
};

// Every codec gets the same L2 bytes: room for `int8_prefixes` at int8.
LagRun run_lag_workload(const char* codec, size_t lag, size_t steps, size_t prefix, size_t int8_prefixes) {
  RadixCacheOptions o;
  o.demotion_threads = 0;  // inline: the same decisions every run
  HostKvPoolOptions spec;
  EXPECT_TRUE(parse_host_codec(codec, spec).is_ok());
  const KvGeometry g = tiny_geometry(1);  // K and V rows of one head of 16
  const uint64_t int8_bytes = 2 * g.num_layers * RecordLayout::compute(CodecKind::kInt8, {1, 16}, kDefaultRecordAlign).record_bytes;
  Harness h(spec.codec, 1, /*l1_slots=*/4 * prefix, 0, o, 2, RecordOrder::kTokenMajor, spec.demotion,
            int8_prefixes * prefix * int8_bytes);
  const auto text = [&](size_t i) {
    std::vector<TokenId> t(prefix);
    for (size_t k = 0; k < prefix; ++k) t[k] = static_cast<TokenId>((i * 131 + k * 7) % 997);
    return t;
  };
  LagRun run;
  for (size_t i = 0; i < steps; ++i) {
    EXPECT_TRUE(serve(h, text(i), false));
    h.cache->drain_transfers();
    h.cache->evict_l1(h.cache->l1_tokens());
    if (i < lag) continue;
    const std::vector<TokenId> read = text(i - lag);
    if (h.cache->cached_prefix(read).host < prefix) {
      ++run.missed;
      continue;
    }
    const RadixCacheStats before = h.cache->stats();
    size_t restored = 0;
    EXPECT_TRUE(serve(h, read, true, &restored));
    EXPECT_EQ(restored, prefix);
    h.cache->drain_transfers();
    for (int r = 0; r < h.l2->rungs(); ++r)
      run.restored[r] += h.cache->stats().load_back_rung_tokens[r] - before.load_back_rung_tokens[r];
    h.cache->evict_l1(h.cache->l1_tokens());
    EXPECT_TRUE(h.cache->check_invariants().is_ok()) << "step " << i;
  }
  run.stats = h.cache->stats();
  run.band = h.cache->rung0_band_bytes();
  run.int8_prefix_bytes = prefix * int8_bytes;
  return run;
}

// Two prefixes live at a time, in an L2 that holds four at int8: the
// working set fits rung 0. The ladder restores every one of them from
// int8, as int8 alone does, and never sends a new prefix to int4h. (A
// rule that wrote backups at rung 0 only while the room was free sent
// them to int4h once dead prefixes filled the tier, and demoted the live
// ones first: 94 % of restores came from int4h.)
TEST(RadixCacheLadder, AWorkingSetThatFitsRungZeroIsServedAtRungZero) {
  const size_t prefix = 16, steps = 40;
  const LagRun int8 = run_lag_workload("int8", 1, steps, prefix, 4);
  const LagRun tiered = run_lag_workload("tiered:int8,int4h", 1, steps, prefix, 4);
  EXPECT_EQ(int8.missed, 0u);
  EXPECT_EQ(tiered.missed, 0u);
  EXPECT_EQ(tiered.restored[0], (steps - 1) * prefix);
  EXPECT_EQ(tiered.restored[1], 0u);
  EXPECT_EQ(tiered.stats.backup_rung_tokens[1], 0u) << "a new prefix went to the last rung";
  // Each read reaches back over three prefixes: the new one, the one read
  // last step, and itself.
  EXPECT_EQ(tiered.band, 3 * tiered.int8_prefix_bytes);
  EXPECT_GT(tiered.stats.demoted_tokens[1], 0u) << "dead prefixes go down before they are dropped";
  EXPECT_GT(tiered.stats.l2_evicted_tokens, 0u);
}

// Seven prefixes live at a time: beyond rung 0 (four), within the last
// rung (eight). The ladder serves every read, as int4h alone does and
// int8 does not, from int4h; once the band is known to be empty its
// backups go to int4h directly, rounded once, not demoted there.
TEST(RadixCacheLadder, AWorkingSetBeyondRungZeroIsServedAsTheLastRungAlone) {
  const size_t prefix = 16, steps = 40, lag = 3;
  const LagRun int8 = run_lag_workload("int8", lag, steps, prefix, 4);
  const LagRun int4h = run_lag_workload("int4h", lag, steps, prefix, 4);
  const LagRun tiered = run_lag_workload("tiered:int8,int4h", lag, steps, prefix, 4);
  EXPECT_GT(int8.missed, 0u) << "the case must exceed rung 0";
  EXPECT_EQ(tiered.missed, int4h.missed);
  EXPECT_EQ(tiered.restored[0] + tiered.restored[1], int4h.restored[0]);
  EXPECT_EQ(tiered.band, 0u);
  EXPECT_GT(tiered.stats.backup_rung_tokens[1], 4 * tiered.stats.demoted_tokens[1]);
  EXPECT_EQ(int8.stats.fragmented_allocations + int4h.stats.fragmented_allocations, 0u) << "one codec never fragments";
}

// While a working set grows, no hit can yet be seen as far back as later
// ones will be: the band's estimate is short. Here each step adds a prompt
// and reads one a third of the way back, so reads reach ever farther, and
// at the end every prompt is read again. The tier holds all sixteen at
// int4h, so int4h alone keeps every one: while the farthest hit still
// grows, a ladder demotes the band rather than drop for it. (Dropping the
// least recently used prompts outside the band, as the ladder did, lost
// two that the last reads wanted.)
TEST(RadixCacheLadder, NothingIsDroppedForTheBandWhileItsEstimateStillGrows) {
  const size_t prefix = 16, prompts = 16;
  for (const char* codec : {"int4h", "tiered:int8,int4h"}) {
    SCOPED_TRACE(codec);
    RadixCacheOptions o;
    o.demotion_threads = 0;    // inline: the same decisions every run
    o.demotion_watermark = 0;  // only allocations demote
    HostKvPoolOptions spec;
    ASSERT_TRUE(parse_host_codec(codec, spec).is_ok());
    const KvGeometry g = tiny_geometry(1);
    const uint64_t int4h_token =
        2 * g.num_layers * RecordLayout::compute(CodecKind::kInt4H, {1, 16}, kDefaultRecordAlign).record_bytes;
    Harness h(spec.codec, 1, /*l1_slots=*/4 * prefix, 0, o, 2, RecordOrder::kTokenMajor, spec.demotion,
              prompts * prefix * int4h_token);
    ASSERT_EQ(h.l2->free_tokens(h.l2->rungs() - 1), prompts * prefix) << "room for every prompt at int4h, no more";
    const auto text = [&](size_t i) {
      std::vector<TokenId> t(prefix);
      for (size_t k = 0; k < prefix; ++k) t[k] = static_cast<TokenId>((i * 131 + k * 7) % 997);
      return t;
    };
    const auto step = [&](size_t i, bool use_host) {
      ASSERT_TRUE(serve(h, text(i), use_host));
      h.cache->drain_transfers();
      h.cache->evict_l1(h.cache->l1_tokens());
      ASSERT_TRUE(h.cache->check_invariants().is_ok()) << "prompt " << i;
    };
    for (size_t i = 0; i < prompts; ++i) {
      step(i, false);
      if (i > 0) step(i - 1 - (i - 1) / 3, true);  // a third of the way back: ever farther
    }
    for (size_t i = 0; i < prompts; ++i)
      EXPECT_EQ(h.cache->cached_prefix(text(i)).host, prefix) << "prompt " << i << " was dropped";
    EXPECT_EQ(h.cache->stats().l2_evicted_tokens, 0u);
    if (h.l2->rungs() > 1) {
      EXPECT_GT(h.cache->stats().demoted_tokens[1], 0u) << "the case must need room";
    }
  }
}

// A ladder's granule is a last-rung token, and an upper rung's token takes
// whole granules: a token demoted in place frees whole last-rung tokens, so
// the last rung finds room wherever the free granules are. (When the
// granule was the rungs' greatest common divisor, unpadded records made
// this very case drop a prompt: each demoted token freed a tail too short
// for an int4h token.)
TEST(RadixCacheLadder, DemotedTailsAreRoomForTheLastRungAndNothingIsDropped) {
  RadixCacheOptions o;
  o.demotion_threads = 0;    // inline
  o.demotion_watermark = 0;  // only allocations demote
  const KvGeometry g = tiny_geometry(1);
  const size_t align = 1;  // unpadded records: an int8 token is less than two int4h ones
  const uint64_t int8_token = 2 * g.num_layers * RecordLayout::compute(CodecKind::kInt8, {1, 16}, align).record_bytes;
  const uint64_t int4h_token = 2 * g.num_layers * RecordLayout::compute(CodecKind::kInt4H, {1, 16}, align).record_bytes;
  ASSERT_LT(int8_token, 2 * int4h_token);
  const size_t tokens = 8;  // one-token prompts that fill the tier at int8
  Harness h(CodecKind::kInt8, 1, /*l1_slots=*/64, 0, o, 2, RecordOrder::kTokenMajor, {CodecKind::kInt4H},
            tokens * 2 * int4h_token, align);
  ASSERT_EQ(h.l2->span(0), 2u);
  ASSERT_EQ(h.l2->span(1), 1u);
  const auto prompt = [](size_t i) { return std::vector<TokenId>{static_cast<TokenId>(100 + i)}; };
  for (size_t i = 0; i < tokens; ++i) {
    ASSERT_TRUE(serve(h, prompt(i), false));
    h.cache->drain_transfers();
    h.cache->evict_l1(h.cache->l1_tokens());
  }
  ASSERT_EQ(h.cache->stats().backup_rung_tokens[0], tokens);
  ASSERT_EQ(h.l2->free_tokens(1), 0u) << "the tier is full";

  // As many again: each finds the room that demoting the others frees.
  for (size_t i = tokens; i < 2 * tokens; ++i) {
    ASSERT_TRUE(serve(h, prompt(i), false));
    h.cache->drain_transfers();
    h.cache->evict_l1(h.cache->l1_tokens());
  }
  const RadixCacheStats s = h.cache->stats();
  EXPECT_EQ(s.fragmented_allocations, 0u);
  EXPECT_EQ(s.l2_evicted_tokens, 0u);
  EXPECT_EQ(s.demoted_tokens[1], tokens);
  for (size_t i = 0; i < 2 * tokens; ++i) EXPECT_EQ(h.cache->cached_prefix(prompt(i)).host, 1u) << "prompt " << i;
  EXPECT_EQ(h.l2->free_tokens(1), 0u);
  EXPECT_TRUE(h.cache->check_invariants().is_ok());
}

// An upper rung's token takes several granules, so its allocations can
// still meet free granules enough in runs too short. Such an allocation is
// counted, with what it dropped: here nothing, as nothing can go.
TEST(RadixCacheLadder, AnAllocationInFragmentedRoomIsCounted) {
  RadixCacheOptions o;
  o.demotion_threads = 0;
  Harness h(CodecKind::kInt8, 1, /*l1_slots=*/64, /*l2_slots=*/16, o, 2, RecordOrder::kTokenMajor, {CodecKind::kInt4H});
  ASSERT_EQ(h.l2->span(0), 2u);
  const size_t granules = h.l2->num_slots();
  auto all = h.cache->allocate_l2(granules, 1);
  ASSERT_TRUE(all.is_ok()) << all.status().to_string();
  std::vector<SlotId> every_other;
  for (size_t i = 0; i < all->size(); i += 2) every_other.push_back((*all)[i]);
  ASSERT_TRUE(h.l2->free(every_other).is_ok());
  ASSERT_EQ(h.l2->free_tokens(0), granules / 4);

  EXPECT_EQ(h.cache->allocate_l2(1, 0).status().code(), StatusCode::kResourceExhausted);
  const RadixCacheStats s = h.cache->stats();
  EXPECT_EQ(s.fragmented_allocations, 1u);
  EXPECT_EQ(s.fragmentation_dropped_tokens, 0u);
  EXPECT_TRUE(h.cache->allocate_l2(every_other.size(), 1).is_ok()) << "the last rung takes every free granule";
  EXPECT_EQ(h.cache->stats().fragmented_allocations, 1u);
}

// Demotions held until the test opens the gate (or 30 s pass, so that a
// cache that waits for one fails the test instead of hanging it), on a
// ladder whose tier holds four `prefix`-token prompts at int8 and one more
// at int4h; text(i) is prompt i.
struct HeldDemotionLadder {
  static constexpr size_t prefix = 16;
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::unique_ptr<Harness> h;

  HeldDemotionLadder() {
    RadixCacheOptions o;
    o.demotion_threads = 1;
    o.demotion_watermark = 0;  // no demoting ahead: only allocations start demotions
    o.demotion_hook = [this](Ticket) {
      std::unique_lock lock(mu);
      cv.wait_for(lock, std::chrono::seconds(30), [&] { return open; });
      return Status::ok();
    };
    const KvGeometry g = tiny_geometry(1);
    const auto prefix_bytes = [&](CodecKind kind) {
      return prefix * 2 * g.num_layers * RecordLayout::compute(kind, {1, 16}, kDefaultRecordAlign).record_bytes;
    };
    // An int8 token takes two int4h tokens' room in a ladder's tier.
    h = std::make_unique<Harness>(CodecKind::kInt8, 1, /*l1_slots=*/8 * prefix, 0, o, 2, RecordOrder::kTokenMajor,
                                  std::vector<CodecKind>{CodecKind::kInt4H},
                                  4 * 2 * prefix_bytes(CodecKind::kInt4H) + prefix_bytes(CodecKind::kInt4H));
    EXPECT_EQ(h->l2->token_stride(0), 2 * h->l2->token_stride(1));
  }
  static std::vector<TokenId> text(size_t i) {
    std::vector<TokenId> t(prefix);
    for (size_t k = 0; k < prefix; ++k) t[k] = static_cast<TokenId>((i * 131 + k * 7) % 997);
    return t;
  }
  void set_open(bool value) {
    {
      std::lock_guard lock(mu);
      open = value;
    }
    cv.notify_all();
  }
  // Prompts first..last-1 at int8, each but the first read back once (so the
  // tier knows its hits land within three prompts: rung 0's band).
  void fill(size_t first, size_t last) {
    for (size_t i = first; i < last; ++i) {
      ASSERT_TRUE(serve(*h, text(i), false));
      h->cache->drain_transfers();
      h->cache->evict_l1(h->cache->l1_tokens());
      if (i == first) continue;
      size_t restored = 0;
      ASSERT_TRUE(serve(*h, text(i - 1), true, &restored));
      ASSERT_EQ(restored, prefix);
      h->cache->drain_transfers();
      h->cache->evict_l1(h->cache->l1_tokens());
    }
  }
  ~HeldDemotionLadder() { set_open(true); }
};

// The cache runs on the scheduler's thread, where waiting for a demotion
// stalls every request. A backup at rung 0 that needs room while the
// demotion making it is still under way goes to the last rung instead, and
// nothing waits.
TEST(RadixCacheLadder, ABackupDoesNotWaitForADemotionUnderWay) {
  HeldDemotionLadder t;
  Harness& h = *t.h;
  const size_t prefix = t.prefix;
  t.fill(0, 4);
  const RadixCacheStats before = h.cache->stats();
  ASSERT_EQ(before.backup_rung_tokens[1], 0u) << "the setup wrote at int4h already";
  ASSERT_TRUE(h.cache->rung0_band_bytes().has_value());

  // The fifth: rung 0 by the band, no room there; the oldest prompt's
  // demotion starts and is held.
  ASSERT_TRUE(serve(h, t.text(4), false));
  h.engine->drain();
  h.cache->poll_transfers();
  const RadixCacheStats during = h.cache->stats();
  EXPECT_EQ(during.demotion_waits, 0u);
  EXPECT_EQ(during.backup_rung_tokens[1] - before.backup_rung_tokens[1], prefix) << "not written at the last rung";
  EXPECT_EQ(h.cache->demotion_engine()->stats().jobs, 0u) << "the held demotion cannot have finished";
  h.cache->evict_l1(h.cache->l1_tokens());
  EXPECT_EQ(h.cache->cached_prefix(t.text(4)).host, prefix) << "its backup landed";
  t.set_open(true);
  h.cache->drain_transfers();
  EXPECT_GT(h.cache->stats().demoted_tokens[1], 0u) << "the demotion lands afterwards";
  EXPECT_EQ(h.cache->stats().demotion_waits, 0u);
  EXPECT_TRUE(h.cache->check_invariants().is_ok()) << h.cache->check_invariants().to_string();
  EXPECT_TRUE(serve(h, t.text(4), true));  // and the last-rung copy restores
}

// Demote before drop, for a backup that may not wait too: while the
// demotions under way will free the room it needs, nothing is dropped for
// it. The backup takes the last rung's free room, or waits.
TEST(RadixCacheLadder, NothingIsDroppedForRoomADemotionUnderWayWillFree) {
  HeldDemotionLadder t;
  Harness& h = *t.h;
  const size_t prefix = t.prefix;
  t.fill(0, 4);
  // The fifth at the last rung, while the first's demotion is held (as
  // above); then that demotion lands.
  ASSERT_TRUE(serve(h, t.text(4), false));
  h.engine->drain();
  h.cache->poll_transfers();
  t.set_open(true);
  h.cache->drain_transfers();
  h.cache->evict_l1(h.cache->l1_tokens());
  ASSERT_EQ(h.cache->stats().demoted_tokens[1], prefix);
  ASSERT_EQ(h.l2->free_tokens(1), prefix) << "room for one prompt at int4h";
  ASSERT_EQ(h.cache->stats().l2_evicted_tokens, 0u);

  // The sixth: rung 0 by the band, no room there. The next int8 prompt's
  // demotion starts and is held; the int4h prompts outside the band, the
  // first among them, could be dropped at once, and are not.
  t.set_open(false);
  ASSERT_TRUE(serve(h, t.text(5), false));
  h.engine->drain();
  h.cache->poll_transfers();
  EXPECT_EQ(h.cache->stats().l2_evicted_tokens, 0u);
  EXPECT_EQ(h.cache->stats().demotion_waits, 0u) << "the last rung had room: nothing waited either";
  h.cache->evict_l1(h.cache->l1_tokens());
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(h.cache->cached_prefix(t.text(i)).host, prefix) << "prompt " << i;
  t.set_open(true);
  h.cache->drain_transfers();
  EXPECT_TRUE(h.cache->check_invariants().is_ok()) << h.cache->check_invariants().to_string();
}

// The storage tier reads the L2 slots a backup hands it as rung-0 records,
// on a worker thread. Write-back backs a parent up after its children, so
// the paths it hands over run down into them; a child already demoted holds
// another rung's records, and one under demotion has records a demotion
// thread is rewriting in place. Neither may be handed over (kNoSlot).
TEST(RadixCacheLadder, ABackupHandsStorageOnlyRungZeroRecordsOfItsDescendants) {
  for (const bool held : {false, true}) {
    SCOPED_TRACE(held ? "child under demotion" : "child demoted");
    std::mutex mu;
    std::condition_variable cv;
    bool open = false;
    RadixCacheOptions o;
    o.write_policy = WritePolicy::kWriteBack;
    o.demotion_threads = held ? 1 : 0;
    o.demotion_watermark = 1.0;  // demote every host-only node ahead
    if (held)
      o.demotion_hook = [&](Ticket) {
        std::unique_lock lock(mu);
        cv.wait_for(lock, std::chrono::seconds(30), [&] { return open; });
        return Status::ok();
      };
    Harness h(CodecKind::kInt8, 1, /*l1_slots=*/64, /*l2_slots=*/256, o, 2, RecordOrder::kTokenMajor,
              {CodecKind::kInt4H});
    std::vector<TokenId> handed_tokens;
    std::vector<SlotId> handed_slots;
    h.cache->set_backup_listener([&](std::span<const TokenId> tokens, std::span<const SlotId> slots) {
      ASSERT_EQ(tokens.size(), slots.size());
      handed_tokens.assign(tokens.begin(), tokens.end());
      handed_slots.assign(slots.begin(), slots.end());
    });
    std::vector<TokenId> text(16);
    for (size_t k = 0; k < text.size(); ++k) text[k] = static_cast<TokenId>(k * 7 + 3);
    const std::span<const TokenId> parent = std::span<const TokenId>(text).first(8);
    ASSERT_TRUE(serve(h, parent, false));
    ASSERT_TRUE(serve(h, text, false));
    // The child alone leaves L1 (backed up on the way), then is demoted.
    ASSERT_EQ(h.cache->evict_l1(8), 8u);
    const std::vector<TokenId> child_path = handed_tokens;
    ASSERT_EQ(child_path.size(), text.size());
    h.cache->poll_transfers();
    if (!held) {
      h.cache->drain_transfers();
      ASSERT_EQ(h.cache->stats().demoted_tokens[1], 8u);
    }
    // The parent leaves L1 now; its backup hands over the path through the child.
    handed_tokens.clear();
    ASSERT_EQ(h.cache->evict_l1(8), 8u);
    ASSERT_EQ(handed_tokens, child_path);
    for (size_t t = 0; t < handed_slots.size(); ++t) {
      if (t < parent.size()) {
        ASSERT_NE(handed_slots[t], RadixCache::kNoSlot) << "the parent's own backup is at rung 0";
        EXPECT_EQ(h.l2->rung_of(handed_slots[t]), 0) << "token " << t;
      } else {
        EXPECT_EQ(handed_slots[t], RadixCache::kNoSlot) << "token " << t << " of the demoted child";
      }
    }
    {
      std::lock_guard lock(mu);
      open = true;
    }
    cv.notify_all();
    h.cache->drain_transfers();
    EXPECT_TRUE(h.cache->check_invariants().is_ok()) << h.cache->check_invariants().to_string();
    EXPECT_TRUE(serve(h, text, true));  // and both come back, the child from int4h
  }
}

// A restore of a node whose demotion no worker has started takes the job
// back and restores from the records as they are, without waiting: behind
// a held job, a queued one would otherwise keep the scheduler's thread
// waiting for every job ahead of it.
TEST(RadixCacheLadder, ARestoreTakesBackADemotionNoWorkerHasStarted) {
  std::mutex mu;
  std::condition_variable cv;
  bool started = false, open = false;
  RadixCacheOptions o;
  o.demotion_threads = 1;
  o.demotion_watermark = 1.0;  // demote every host-only node ahead
  // The first job is held until the test opens the gate (or 30 s pass, so
  // that a cache that waits fails the test instead of hanging it).
  o.demotion_hook = [&](Ticket) {
    std::unique_lock lock(mu);
    started = true;
    cv.notify_all();
    cv.wait_for(lock, std::chrono::seconds(30), [&] { return open; });
    return Status::ok();
  };
  Harness h(CodecKind::kInt8, 1, /*l1_slots=*/64, /*l2_slots=*/256, o, 2, RecordOrder::kTokenMajor,
            {CodecKind::kInt4H});
  std::vector<TokenId> a(16), b(16), c(16);
  for (size_t k = 0; k < a.size(); ++k) {
    a[k] = static_cast<TokenId>(k * 7 + 3);
    b[k] = static_cast<TokenId>(k * 11 + 500);
    c[k] = static_cast<TokenId>(k * 13 + 900);
  }
  ASSERT_TRUE(serve(h, a, false));
  ASSERT_TRUE(serve(h, b, false));
  h.engine->drain();
  h.cache->poll_transfers();  // both backed up (nothing was host-only to demote)
  h.cache->evict_l1(h.cache->l1_tokens());
  // A new prefix moves the clock on (no host hit: the band stays unknown),
  // and the next poll demotes ahead: a's job first (held), then b's (queued).
  ASSERT_TRUE(serve(h, c, false));
  h.cache->poll_transfers();
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return started; }));
  }
  const RadixCacheStats before = h.cache->stats();
  const auto start = std::chrono::steady_clock::now();
  size_t restored = 0;
  ASSERT_TRUE(serve(h, b, true, &restored));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(restored, b.size());
  const RadixCacheStats after = h.cache->stats();
  EXPECT_EQ(after.demotions_taken_back - before.demotions_taken_back, 1u);
  EXPECT_EQ(after.load_back_rung_tokens[0] - before.load_back_rung_tokens[0], b.size()) << "restored at int8";
  EXPECT_EQ(h.cache->demotion_engine()->stats().cancelled_jobs, 1u);
  EXPECT_LT(seconds, 20.0) << "the restore waited for the held demotion";
  {
    std::lock_guard lock(mu);
    open = true;
  }
  cv.notify_all();
  h.cache->drain_transfers();
  EXPECT_EQ(h.cache->stats().demoted_tokens[1], a.size()) << "a's demotion, which had started, lands";
  EXPECT_TRUE(h.cache->check_invariants().is_ok()) << h.cache->check_invariants().to_string();
  EXPECT_TRUE(serve(h, a, true));  // from int4h
}

// ---- randomised, against the invariants and the KV itself -----------------------------

struct RandomCase {
  KvCodecs codec;
  int page_size;
  WritePolicy policy;
  EvictionPolicy eviction;
  bool storage = false;  // a third tier: written through, prefetched from at random
  RecordOrder order = RecordOrder::kLayerMajor;
  std::vector<CodecKind> demotion = {};  // a ladder below `codec`
  int demotion_threads = 0;
  size_t l2_slots = 160;                 // L1 holds 96
};

// A storage tier over `backend` for a harness's cache (synchronous: deterministic).
std::unique_ptr<StorageTier> make_tier(Harness& h, StorageBackend& backend, int block_tokens,
                                       std::string model = "test-model", StorageTierOptions o = {}) {
  // The tier owns its backend; these share one (two servers on one store).
  struct Shared final : StorageBackend {
    explicit Shared(StorageBackend& shared) : b(shared) {}
    std::string_view name() const override { return b.name(); }
    Result<size_t> exists(std::span<const StorageKey> k) override { return b.exists(k); }
    Status read(std::span<const StorageKey> k, const ValueVisitor& visit) override { return b.read(k, visit); }
    Status set(std::span<const StorageKey> k, std::span<const std::vector<std::byte>> v) override { return b.set(k, v); }
    Status remove(std::span<const StorageKey> k) override { return b.remove(k); }
    StorageBackend& b;
  };
  o.synchronous = true;
  o.storage.prefetch_threshold_tokens = 1;
  auto tier = StorageTier::create(
      *h.cache, *h.l2, std::make_unique<Shared>(backend),
      make_storage_fingerprint(h.geometry, h.l2->codec(), h.l2->layout(KvPart::kK).record_align, block_tokens, model), o);
  EXPECT_TRUE(tier.is_ok()) << tier.status().to_string();
  return tier ? std::move(*tier) : nullptr;
}

class RadixCacheRandom : public ::testing::TestWithParam<RandomCase> {};

TEST_P(RadixCacheRandom, ThousandsOfStepsKeepInvariantsAndServeOnlyRightKv) {
  const RandomCase c = GetParam();
  RadixCacheOptions o;
  o.write_policy = c.policy;
  o.eviction = c.eviction;
  o.write_through_threshold = 2;
  o.demotion_threads = c.demotion_threads;
  // On this geometry (head_dim 16) a 16-byte alignment pads BF16 and INT8
  // records alike, and a ladder whose rung frees nothing is refused:
  // three rungs get unpadded records, each rung then smaller than the last.
  const size_t align = c.demotion.size() > 1 ? 1 : kDefaultRecordAlign;
  Harness h(c.codec, c.page_size, /*l1_slots=*/96, c.l2_slots, o, /*workers=*/2, c.order, c.demotion,
            /*l2_bytes=*/0, align);
  ASSERT_NE(h.l2, nullptr);
  std::unique_ptr<StorageBackend> backend;
  std::unique_ptr<StorageTier> tier;
  if (c.storage) {
    backend = *make_memory_backend(size_t{64} << 20);
    tier = make_tier(h, *backend, 2 * c.page_size);
    ASSERT_NE(tier, nullptr);
  }
  std::mt19937 rng(1234 + static_cast<uint32_t>(c.page_size));
  std::vector<std::vector<TokenId>> history;
  size_t restored = 0, served = 0;
  for (int step = 0; step < 1500; ++step) {
    const auto action = rng() % 10;
    if (action < 7) {
      std::vector<TokenId> tokens;
      if (!history.empty() && rng() % 3 != 0) {  // extend or branch from an earlier sequence
        const auto& base = history[rng() % history.size()];
        tokens.assign(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(rng() % (base.size() + 1)));
      }
      const size_t extra = 1 + rng() % 12;
      for (size_t i = 0; i < extra && tokens.size() < 40; ++i) tokens.push_back(static_cast<TokenId>(rng() % 3));
      if (serve(h, tokens, rng() % 4 != 0, &restored)) {
        ++served;
        history.push_back(tokens);
        if (history.size() > 64) history.erase(history.begin());
      }
    } else if (action == 7) {
      h.cache->evict_l1(rng() % 24);
    } else if (action == 8) {
      h.cache->evict_l2(rng() % 24);
    } else if (tier != nullptr && !history.empty() && rng() % 2 == 0) {
      tier->start_prefetch(history[rng() % history.size()]);  // what storage holds of it comes back to L2
    } else {
      h.cache->poll_transfers();
    }
    if (tier != nullptr) tier->poll();  // nothing of storage's stays pinned or unapplied between steps
    const Status st = h.cache->check_invariants();
    ASSERT_TRUE(st.is_ok()) << "step " << step << ": " << st.to_string();
    // Nothing is held outside the tree between requests: no leaked slot.
    ASSERT_EQ(h.l1->allocator().used_count(), h.cache->l1_tokens()) << "step " << step;
    ASSERT_EQ(h.l2->used_tokens(), h.cache->l2_tokens()) << "step " << step;
  }
  h.cache->drain_transfers();
  if (tier != nullptr) {
    tier->poll();
    EXPECT_GT(tier->stats().written_blocks, 0u);
    EXPECT_GT(tier->stats().inserted_tokens, 0u) << "storage never gave anything back";
    EXPECT_EQ(tier->stats().io.corrupt_values, 0u);
    tier.reset();
  }
  ASSERT_TRUE(h.cache->check_invariants().is_ok());
  EXPECT_GT(served, 700u);
  if (c.policy != WritePolicy::kWriteThroughSelective) {
    EXPECT_GT(restored, 0u) << "the host tier was never used";
  }
  // Every rung is reached. With inline demotion (the same decisions every
  // run) every rung is restored from too; with worker threads, which node a
  // restore finds at which rung depends on their timing, and a middle rung's
  // nodes may all have gone on down before a hit: then the rungs below
  // rung 0 are restored from, together.
  size_t below_rung0 = 0;
  for (size_t rung = 1; rung <= c.demotion.size(); ++rung) {
    EXPECT_GT(h.cache->stats().demoted_tokens[rung], 0u) << "nothing reached rung " << rung;
    below_rung0 += h.cache->stats().load_back_rung_tokens[rung];
    if (c.demotion_threads == 0) {
      EXPECT_GT(h.cache->stats().load_back_rung_tokens[rung], 0u) << "nothing was restored from rung " << rung;
    }
  }
  if (!c.demotion.empty()) {
    EXPECT_GT(below_rung0, 0u) << "nothing was restored from below rung 0";
  }
  h.cache->clear();
  EXPECT_EQ(h.l1->allocator().used_count(), 0u);
  EXPECT_EQ(h.l2->used_tokens(), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Policies, RadixCacheRandom,
    ::testing::Values(RandomCase{CodecKind::kBf16, 1, WritePolicy::kWriteThrough, EvictionPolicy::kLru},
                      RandomCase{CodecKind::kInt8, 1, WritePolicy::kWriteThrough, EvictionPolicy::kLfu},
                      RandomCase{CodecKind::kInt4H, 4, WritePolicy::kWriteThrough, EvictionPolicy::kLru},
                      RandomCase{CodecKind::kFp8, 2, WritePolicy::kWriteBack, EvictionPolicy::kLru},
                      RandomCase{CodecKind::kInt8, 1, WritePolicy::kWriteThroughSelective, EvictionPolicy::kLru},
                      RandomCase{CodecKind::kInt8, 1, WritePolicy::kWriteThrough, EvictionPolicy::kLru, true},
                      RandomCase{CodecKind::kInt4H, 2, WritePolicy::kWriteBack, EvictionPolicy::kLru, true},
                      RandomCase{CodecKind::kFp8, 1, WritePolicy::kWriteThroughSelective, EvictionPolicy::kLfu, true},
                      RandomCase{KvCodecs(CodecKind::kInt8, CodecKind::kInt4H), 2, WritePolicy::kWriteThrough,
                                 EvictionPolicy::kLru, true},
                      RandomCase{KvCodecs(CodecKind::kInt8, CodecKind::kInt4H), 1, WritePolicy::kWriteBack,
                                 EvictionPolicy::kLru, true, RecordOrder::kTokenMajor},
                      RandomCase{CodecKind::kInt8, 1, WritePolicy::kWriteThrough, EvictionPolicy::kLru, false,
                                 RecordOrder::kTokenMajor, {CodecKind::kInt4H}},
                      RandomCase{CodecKind::kBf16, 2, WritePolicy::kWriteBack, EvictionPolicy::kLru, false,
                                 RecordOrder::kTokenMajor, {CodecKind::kInt8, CodecKind::kInt4H}, /*threads=*/2},
                      RandomCase{CodecKind::kInt8, 1, WritePolicy::kWriteThrough, EvictionPolicy::kLfu, true,
                                 RecordOrder::kTokenMajor, {CodecKind::kInt4}, /*threads=*/1},
                      RandomCase{CodecKind::kBf16, 2, WritePolicy::kWriteBack, EvictionPolicy::kLru, false,
                                 RecordOrder::kTokenMajor, {CodecKind::kInt8, CodecKind::kInt4H}, /*threads=*/0},
                      RandomCase{CodecKind::kInt8, 2, WritePolicy::kWriteBack, EvictionPolicy::kLru, false,
                                 RecordOrder::kTokenMajor, {CodecKind::kInt4H}, /*threads=*/2},
                      RandomCase{CodecKind::kBf16, 2, WritePolicy::kWriteThrough, EvictionPolicy::kLru, false,
                                 RecordOrder::kTokenMajor, {CodecKind::kInt8, CodecKind::kInt4H}, /*threads=*/2},
                      // Selective backups start inside a match, in an L2 smaller than L1 that
                      // storage keeps filling: their room must not come from the matched path.
                      RandomCase{CodecKind::kInt8, 1, WritePolicy::kWriteThroughSelective, EvictionPolicy::kLru, true,
                                 RecordOrder::kTokenMajor, {CodecKind::kInt4H}, /*threads=*/0, /*l2_slots=*/16}),
    [](const auto& p) {
      std::string codec = p.param.codec.name();  // "k=int8,v=int4h" → "k_int8_v_int4h"
      std::replace_if(codec.begin(), codec.end(), [](char ch) { return !std::isalnum(static_cast<unsigned char>(ch)); }, '_');
      return codec + "_page" + std::to_string(p.param.page_size) + "_" +
             std::string(write_policy_name(p.param.policy)) +
             (p.param.eviction == EvictionPolicy::kLfu ? "_lfu" : "_lru") + (p.param.storage ? "_storage" : "") +
             (p.param.order == RecordOrder::kTokenMajor ? "_token_major" : "") +
             [&] {
               std::string ladder;
               for (CodecKind k : p.param.demotion) ladder += "_" + std::string(codec_name(k));
               return ladder.empty() ? ladder
                                     : "_demoting_to" + ladder + "_" + std::to_string(p.param.demotion_threads) + "threads";
             }();
    });

TEST(RadixCache, InsertHostAddsHostOnlyKvBelowACachedPathAndFreesWhatItHolds) {
  RadixCacheOptions o;
  o.write_policy = WritePolicy::kWriteBack;  // nothing reaches L2 but what insert_host brings
  Harness h(CodecKind::kInt8, 1, 64, 64, o);
  std::vector<TokenId> a(12);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<TokenId>(100 + i);
  ASSERT_TRUE(serve(h, std::span(a).first(4), false));  // tokens 0..3 in L1
  auto slots = *h.l2->allocate(8);
  EXPECT_EQ(h.cache->insert_host(a, 4, slots), 8u);
  EXPECT_EQ(h.cache->cached_prefix(a).l1, 4u);
  EXPECT_EQ(h.cache->cached_prefix(a).host, 8u);
  EXPECT_TRUE(h.cache->check_invariants().is_ok());
  EXPECT_EQ(h.l2->used_tokens(), 8u);
  // The same tokens again: the tree's copy stays, the new slots are freed.
  auto again = *h.l2->allocate(8);
  EXPECT_EQ(h.cache->insert_host(a, 4, again), 0u);
  EXPECT_EQ(h.l2->used_tokens(), 8u);
  EXPECT_EQ(h.cache->stats().host_insert_duplicate_tokens, 8u);
  // An L1 node without an L2 copy adopts the slots as its backup.
  auto backup = *h.l2->allocate(4);
  EXPECT_EQ(h.cache->insert_host(a, 0, backup), 4u);
  EXPECT_EQ(h.l2->used_tokens(), 12u);
  // Below a path that is not cached: nothing is taken, every slot freed.
  std::vector<TokenId> other = {7, 7, 7, 7, 8, 8};
  auto stray = *h.l2->allocate(2);
  EXPECT_EQ(h.cache->insert_host(other, 4, stray), 0u);
  EXPECT_EQ(h.l2->used_tokens(), 12u);
  EXPECT_TRUE(h.cache->check_invariants().is_ok());
}

// Two servers on one store, one after the other (a restart): the second finds
// what the first computed, restores it through L2, and reads the right KV.
TEST(StorageTier, ARestartedServerRestoresWhatTheFirstComputedFromStorage) {
  auto backend = *make_memory_backend(size_t{16} << 20);
  std::vector<TokenId> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<TokenId>(i * 3 + 1);
  {
    Harness first(CodecKind::kInt8, 2, 64, 128, RadixCacheOptions{});
    auto tier = make_tier(first, *backend, 8);
    ASSERT_TRUE(serve(first, prompt, true));
    first.cache->drain_transfers();
    tier->poll();
    EXPECT_EQ(tier->stats().written_blocks, 5u);  // 40 tokens: five blocks of 8
  }
  Harness second(CodecKind::kInt8, 2, 64, 128, RadixCacheOptions{});
  auto tier = make_tier(second, *backend, 8);
  std::vector<TokenId> longer = prompt;
  longer.insert(longer.end(), {5, 6, 7, 8});
  ASSERT_NE(tier->start_prefetch(longer), 0u);
  tier->poll();
  EXPECT_EQ(tier->stats().inserted_tokens, 40u);
  EXPECT_EQ(second.cache->cached_prefix(longer).host, 40u);
  size_t restored = 0;
  ASSERT_TRUE(serve(second, longer, true, &restored));  // checks every restored row
  EXPECT_EQ(restored, 40u);
  // What is cached is not fetched again.
  EXPECT_EQ(tier->start_prefetch(longer), 0u);
}

// Flips a byte in the middle of the value stored under `key`, as bit rot would.
void corrupt_value(StorageBackend& backend, const StorageKey& key) {
  auto values = backend.get(std::span(&key, 1));
  ASSERT_TRUE(values.is_ok() && values->size() == 1 && !(*values)[0].empty()) << "no value to corrupt";
  (*values)[0][(*values)[0].size() / 2] ^= std::byte{0x40};
  ASSERT_TRUE(backend.set(std::span(&key, 1), *values).is_ok());
}

TEST(StorageTier, ACorruptOrForeignValueIsAMissNeverServed) {
  auto backend = *make_memory_backend(size_t{16} << 20);
  std::vector<TokenId> prompt(32);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<TokenId>(i + 9);
  {
    Harness first(CodecKind::kInt8, 1, 64, 128, RadixCacheOptions{});
    auto tier = make_tier(first, *backend, 8);
    ASSERT_TRUE(serve(first, prompt, true));
    first.cache->drain_transfers();
    tier->poll();
    corrupt_value(*backend, storage_keys(tier->fingerprint(), prompt)[2]);  // the third block's value
  }
  {
    Harness other(CodecKind::kInt4, 1, 64, 128, RadixCacheOptions{});  // another codec: other keys
    auto tier = make_tier(other, *backend, 8);
    tier->start_prefetch(prompt);
    tier->poll();
    EXPECT_EQ(tier->stats().inserted_tokens, 0u);
  }
  Harness second(CodecKind::kInt8, 1, 64, 128, RadixCacheOptions{});
  auto tier = make_tier(second, *backend, 8);
  ASSERT_NE(tier->start_prefetch(prompt), 0u);
  tier->poll();
  EXPECT_EQ(tier->stats().io.corrupt_values, 1u);
  EXPECT_EQ(tier->stats().inserted_tokens, 16u);  // the two blocks before the corrupt one
  EXPECT_EQ(second.l2->used_tokens(), 16u);  // the rest of the fetch's slots went back
  size_t restored = 0;
  ASSERT_TRUE(serve(second, prompt, true, &restored));
  EXPECT_EQ(restored, 16u);
}

// One server: a value it wrote rots, a prefetch finds it unusable and removes
// it, and the next backup of the prompt writes that block again (the tier must
// not go on taking it for written), so the whole chain is in storage again.
TEST(StorageTier, AValueFoundUnusableIsWrittenAgainByTheNextBackup) {
  auto backend = *make_memory_backend(size_t{16} << 20);
  std::vector<TokenId> prompt(32);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<TokenId>(i + 5);
  Harness h(CodecKind::kInt8, 1, 64, 128, RadixCacheOptions{});
  auto tier = make_tier(h, *backend, 8);
  ASSERT_TRUE(serve(h, prompt, true));
  h.cache->drain_transfers();
  tier->poll();
  ASSERT_EQ(tier->stats().written_blocks, 4u);
  const auto keys = storage_keys(tier->fingerprint(), prompt);
  for (size_t rotten : {size_t{0}, size_t{2}}) {  // the chain's first block, then one inside it
    corrupt_value(*backend, keys[rotten]);
    h.cache->evict_l1(64);
    h.cache->evict_l2(128);
    ASSERT_EQ(h.cache->cached_prefix(prompt).total(), 0u);
    tier->start_prefetch(prompt);
    tier->poll();
    EXPECT_EQ(*backend->exists(keys), rotten);  // the run ends at the removed value
    const uint64_t written = tier->stats().written_blocks;
    ASSERT_TRUE(serve(h, prompt, true));  // the rest is computed and backed up again
    h.cache->drain_transfers();
    tier->poll();
    EXPECT_EQ(tier->stats().written_blocks, written + 1) << "block " << rotten;
    EXPECT_EQ(*backend->exists(keys), keys.size()) << "block " << rotten;
  }
  EXPECT_EQ(tier->stats().io.corrupt_values, 2u);
  // A restarted server restores the whole prompt from storage, every row checked.
  Harness second(CodecKind::kInt8, 1, 64, 128, RadixCacheOptions{});
  auto fresh = make_tier(second, *backend, 8);
  ASSERT_NE(fresh->start_prefetch(prompt), 0u);
  fresh->poll();
  EXPECT_EQ(fresh->stats().inserted_tokens, 32u);
  size_t restored = 0;
  ASSERT_TRUE(serve(second, prompt, true, &restored));
  EXPECT_EQ(restored, 32u);
}

// Two prompts that start alike, prefetched at once: the second follows the
// first's fetch of the shared blocks, then fetches only its own.
TEST(StorageTier, PromptsSharingBlocksShareOneFetch) {
  auto backend = *make_memory_backend(size_t{16} << 20);
  std::vector<TokenId> a(48), b(48);
  for (size_t i = 0; i < 48; ++i) {
    a[i] = static_cast<TokenId>(i + 1);
    b[i] = i < 32 ? a[i] : static_cast<TokenId>(100 + i);
  }
  {
    Harness first(CodecKind::kInt8, 1, 128, 256, RadixCacheOptions{});
    auto tier = make_tier(first, *backend, 16);
    ASSERT_TRUE(serve(first, a, true));
    ASSERT_TRUE(serve(first, b, true));
    first.cache->drain_transfers();
    tier->poll();
    EXPECT_EQ(tier->stats().written_blocks, 4u);  // a's three, b's own third
  }
  Harness second(CodecKind::kInt8, 1, 128, 256, RadixCacheOptions{});
  auto tier = make_tier(second, *backend, 16);
  const auto pa = tier->start_prefetch(a), pb = tier->start_prefetch(b);
  ASSERT_NE(pa, 0u);
  ASSERT_NE(pb, 0u);
  EXPECT_EQ(tier->stats().followed_prefetches, 1u);
  tier->poll();
  EXPECT_EQ(tier->stats().fetched_blocks, 4u);  // the shared two once
  EXPECT_EQ(tier->stats().probes, 2u);          // a's, and b's look again for its own block
  EXPECT_EQ(tier->inserted_tokens(pa), 48u);
  EXPECT_EQ(tier->inserted_tokens(pb), 48u);    // 32 through a's fetch, 16 of its own
  EXPECT_FALSE(tier->should_wait(pb, 0, 0));
  size_t restored = 0;
  ASSERT_TRUE(serve(second, a, true, &restored));
  ASSERT_TRUE(serve(second, b, true, &restored));
  EXPECT_EQ(restored, 48u + 16u);  // b finds the shared blocks in L1 by then
}

TEST(StorageTier, SlotsBeingWrittenOutStayIntactUntilTheWriteIsApplied) {
  auto backend = *make_memory_backend(size_t{16} << 20);
  Harness h(CodecKind::kBf16, 1, 64, 64, RadixCacheOptions{});
  auto tier = make_tier(h, *backend, 4);
  std::vector<TokenId> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_TRUE(serve(h, prompt, false));
  h.cache->drain_transfers();  // the backup completes: a write is issued, its slots pinned
  h.cache->clear();            // the tree lets go of everything
  EXPECT_EQ(h.l2->released_pinned_count(), 8u);
  EXPECT_EQ(h.l2->free_tokens(), h.l2->capacity_tokens() - 8);
  tier->poll();
  EXPECT_EQ(h.l2->released_pinned_count(), 0u);
  EXPECT_EQ(h.l2->free_tokens(), h.l2->capacity_tokens());
  EXPECT_EQ(tier->stats().written_blocks, 2u);
}

// write_back: storage is written when L2 evicts, not when L2 is written; a
// restarted server then restores what left L2 of the first one.
TEST(StorageTier, WriteBackStoresBlocksWhenL2EvictsThem) {
  auto backend = *make_memory_backend(size_t{16} << 20);
  RadixCacheOptions o;
  o.write_policy = WritePolicy::kWriteBack;
  std::vector<TokenId> prompt(44);  // five blocks of 8, and four tokens that make no block
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<TokenId>(i * 5 + 2);
  {
    Harness first(CodecKind::kInt4H, 2, 64, 128, o);
    auto tier = make_tier(first, *backend, 8);
    ASSERT_TRUE(serve(first, prompt, true));
    first.cache->evict_l1(64);  // backs the node up to L2, then frees its L1 slots
    first.cache->drain_transfers();
    tier->poll();
    ASSERT_EQ(first.cache->l2_tokens(), 44u);
    EXPECT_EQ(tier->stats().written_blocks, 0u) << "write_back wrote storage before L2 let go";
    first.cache->evict_l2(128);
    tier->poll();
    EXPECT_EQ(first.cache->l2_tokens(), 0u);
    EXPECT_EQ(tier->stats().written_blocks, 5u);
    EXPECT_EQ(tier->stats().write_back_blocks, 5u);
    EXPECT_EQ(first.l2->free_tokens(), first.l2->capacity_tokens()) << "eviction freed at once";
  }
  Harness second(CodecKind::kInt4H, 2, 64, 128, o);
  auto tier = make_tier(second, *backend, 8);
  ASSERT_NE(tier->start_prefetch(prompt), 0u);
  tier->poll();
  EXPECT_EQ(tier->stats().inserted_tokens, 40u);
  size_t restored = 0;
  ASSERT_TRUE(serve(second, prompt, true, &restored));  // checks every restored row
  EXPECT_EQ(restored, 40u);
  // Fetched blocks are not written back when they leave L2 again.
  second.cache->evict_l1(64);
  second.cache->drain_transfers();
  second.cache->evict_l2(128);
  tier->poll();
  EXPECT_EQ(tier->stats().written_blocks, 0u);
}

// A node evicted from L2 in pieces: the block that straddles a parent and its
// child is written with the child, from both nodes' records.
TEST(StorageTier, WriteBackWritesTheBlockThatSpansAParentAndItsChild) {
  auto backend = *make_memory_backend(size_t{16} << 20);
  RadixCacheOptions o;
  o.write_policy = WritePolicy::kWriteBack;
  std::vector<TokenId> a(20), b(20);
  for (size_t i = 0; i < 20; ++i) {
    a[i] = static_cast<TokenId>(i + 1);
    b[i] = i < 12 ? a[i] : static_cast<TokenId>(500 + i);  // they part in the middle of the second block
  }
  {
    Harness first(CodecKind::kInt8, 1, 64, 128, o);
    auto tier = make_tier(first, *backend, 8);
    ASSERT_TRUE(serve(first, a, true));
    ASSERT_TRUE(serve(first, b, true));
    first.cache->evict_l1(64);
    first.cache->drain_transfers();
    first.cache->evict_l2(128);
    tier->poll();
    EXPECT_EQ(tier->stats().written_blocks, 3u);  // the shared first, and each one's second
  }
  for (const auto& prompt : {a, b}) {
    Harness second(CodecKind::kInt8, 1, 64, 128, o);
    auto tier = make_tier(second, *backend, 8);
    ASSERT_NE(tier->start_prefetch(prompt), 0u);
    tier->poll();
    size_t restored = 0;
    ASSERT_TRUE(serve(second, prompt, true, &restored));
    EXPECT_EQ(restored, 16u);
  }
}

TEST(StorageTier, WriteBackPastItsStagingBoundSkipsBlocksAndCountsThem) {
  auto backend = *make_memory_backend(size_t{16} << 20);
  RadixCacheOptions o;
  o.write_policy = WritePolicy::kWriteBack;
  Harness h(CodecKind::kInt8, 1, 64, 128, o);
  StorageTierOptions so;
  const size_t value_bytes = kStorageHeaderBytes + 8 * h.l2->bytes_per_token();
  so.write_back_staging_bytes = 2 * value_bytes;
  auto tier = make_tier(h, *backend, 8, "test-model", so);
  std::vector<TokenId> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<TokenId>(i + 70);
  ASSERT_TRUE(serve(h, prompt, true));
  h.cache->evict_l1(64);
  h.cache->drain_transfers();
  h.cache->evict_l2(128);  // one node, five blocks: two fit the bound
  tier->poll();
  EXPECT_EQ(tier->stats().written_blocks, 2u);
  EXPECT_EQ(tier->stats().write_back_skipped_blocks, 3u);
  EXPECT_EQ(h.cache->l2_tokens(), 0u);
}

TEST(WritePolicyNames, ParseSglangSpellings) {
  EXPECT_EQ(*parse_write_policy("write_through"), WritePolicy::kWriteThrough);
  EXPECT_EQ(*parse_write_policy("write_through_selective"), WritePolicy::kWriteThroughSelective);
  EXPECT_EQ(*parse_write_policy("write_back"), WritePolicy::kWriteBack);
  EXPECT_NE(parse_write_policy("write_around").status().message().find("--hicache-write-policy"), std::string::npos);
}

}  // namespace
}  // namespace hiq

namespace hiq {
namespace {

// A request that computed a prefix while another request's restore of the same
// prefix is still in flight must not come to rely on the restore's slots: if
// the restore fails, those slots go back to the pool. insert() settles the
// restore first and, here, keeps the request's own KV.
TEST(RadixCache, InsertOverARestoreInFlightThatFailsKeepsTheComputedKv) {
  KvGeometry g = tiny_geometry(1);
  auto l1 = *make_host_memory_device_pool(g, 32);
  HostKvPoolOptions ho;
  ho.codec = CodecKind::kInt8;
  ho.ratio = 2;
  auto l2 = *HostKvPool::create(g, ho, 32);
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  TransferEngineOptions eo;
  eo.before_layer = [&](Ticket, TransferKind kind, int layer) -> Status {
    if (kind != TransferKind::kLoad || layer != 1) return Status::ok();
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return released; });
    return data_loss("injected restore failure");
  };
  auto engine = *make_cpu_transfer_engine(*l1, *l2, eo);
  RadixCache cache(*l1, l2.get(), engine.get());
  const std::vector<TokenId> a = {9, 8, 7, 6, 5, 4, 3, 2};
  (void)cache.insert(a, *l1->allocator().allocate(8));
  cache.drain_transfers();
  cache.evict_l1(100);
  auto back = cache.load_back(cache.match_prefix(a));  // held at layer 1, then fails
  ASSERT_TRUE(back.is_ok());

  const std::vector<SlotId> mine = *l1->allocator().allocate(8);
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    {
      std::lock_guard lock(mu);
      released = true;
    }
    cv.notify_all();
  });
  RadixNode* node = cache.insert(a, mine);  // waits for the restore, sees it fail
  releaser.join();
  EXPECT_EQ(cache.l1_slots_to(node), mine) << "the request's own KV must back the prefix";
  EXPECT_EQ(cache.stats().load_back_failures, 1u);
  cache.poll_transfers();  // the engine's own report of the failure is already applied: ignored
  EXPECT_EQ(cache.stats().load_back_failures, 1u);
  EXPECT_EQ(l1->allocator().used_count(), 8u);
  EXPECT_TRUE(cache.check_invariants().is_ok()) << cache.check_invariants().to_string();
}

}  // namespace
}  // namespace hiq

namespace hiq {
namespace {

// A node whose backup is in flight cannot give up its L1 slots until the
// backup has read them. Eviction frees what is free of transfers first, and
// waits for a backup only when that does not suffice; reclaimable_l1_tokens
// counts both. (No poll: the cache sees the backups in flight however fast
// the workers copy.)
TEST(RadixCache, EvictionWaitsForABackupOnlyWhenNothingElseFrees) {
  Harness h(CodecKind::kInt8, 1, 32, 64, RadixCacheOptions{});
  const std::vector<TokenId> a = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<TokenId> b = {9, 10, 11, 12, 13, 14, 15, 16};
  ASSERT_TRUE(serve(h, a, true));
  h.cache->drain_transfers();  // a: in L1 and L2
  ASSERT_TRUE(serve(h, b, true));
  ASSERT_EQ(h.cache->transfers_in_flight(), 1u);  // b: backing up
  EXPECT_EQ(h.cache->reclaimable_l1_tokens(), 16u);
  {
    PrefixMatch m = h.cache->match_prefix(b);
    CacheLock held = h.cache->lock(m.l1_node);
    EXPECT_EQ(h.cache->reclaimable_l1_tokens(), 8u) << "a locked node is not reclaimable";
  }

  EXPECT_EQ(h.cache->evict_l1(8), 8u);
  EXPECT_EQ(h.cache->stats().l1_eviction_waits, 0u) << "a was free to go: nothing to wait for";
  EXPECT_EQ(h.cache->transfers_in_flight(), 1u);
  EXPECT_EQ(h.cache->l1_tokens(), 8u);

  EXPECT_EQ(h.cache->evict_l1(8), 8u);
  EXPECT_EQ(h.cache->stats().l1_eviction_waits, 1u);
  EXPECT_EQ(h.cache->stats().l1_eviction_wait_tokens, 8u);
  EXPECT_EQ(h.cache->transfers_in_flight(), 0u);
  EXPECT_EQ(h.cache->l1_tokens(), 0u);
  EXPECT_EQ(h.cache->l2_tokens(), 16u) << "b's backup completed before its L1 copy went";
  EXPECT_EQ(h.cache->reclaimable_l1_tokens(), 0u);
  EXPECT_TRUE(h.cache->check_invariants().is_ok()) << h.cache->check_invariants().to_string();
  size_t restored = 0;
  ASSERT_TRUE(serve(h, b, true, &restored));  // checks the restored rows
  EXPECT_EQ(restored, 8u);
}

// A backup that fails while eviction waits for it leaves the node in L1
// only; eviction then drops it (its KV is recomputed when next needed).
TEST(RadixCache, EvictionWaitingForABackupThatFailsDropsTheNode) {
  KvGeometry g = tiny_geometry(1);
  auto l1 = *make_host_memory_device_pool(g, 16);
  HostKvPoolOptions ho;
  ho.codec = CodecKind::kInt8;
  ho.ratio = 2;
  auto l2 = *HostKvPool::create(g, ho, 16);
  TransferEngineOptions eo;
  eo.before_layer = [](Ticket, TransferKind kind, int) {
    return kind == TransferKind::kBackup ? data_loss("injected backup failure") : Status::ok();
  };
  auto engine = *make_cpu_transfer_engine(*l1, *l2, eo);
  RadixCache cache(*l1, l2.get(), engine.get());
  (void)cache.insert(std::vector<TokenId>{1, 2, 3, 4}, *l1->allocator().allocate(4));
  ASSERT_EQ(cache.transfers_in_flight(), 1u);
  EXPECT_EQ(cache.evict_l1(4), 4u);
  EXPECT_EQ(cache.stats().l1_eviction_waits, 1u);
  EXPECT_EQ(cache.stats().backup_failures, 1u);
  EXPECT_EQ(cache.stats().l1_dropped_tokens, 4u);
  EXPECT_EQ(cache.l2_tokens(), 0u);
  EXPECT_EQ(l1->allocator().used_count(), 0u);
  EXPECT_EQ(l2->used_tokens(), 0u);
  EXPECT_TRUE(cache.check_invariants().is_ok()) << cache.check_invariants().to_string();
}

}  // namespace
}  // namespace hiq
