// The precision-tiered host tier: the ladder flag, the pool's granules and
// rungs, the slot allocator against a model of it, in-place demotion, and a
// transfer that restores tokens of several rungs at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "codec/numeric.h"
#include "kv/model_config.h"
#include "memory/device_kv_pool.h"
#include "memory/host_kv_pool.h"
#include "memory/host_slot_allocator.h"
#include "transfer/demotion_engine.h"
#include "transfer/transfer_engine.h"

namespace hiq {
namespace {

TEST(HostCodecFlag, LaddersDescendInBitsAndRoundTrip) {
  HostKvPoolOptions o;
  ASSERT_TRUE(parse_host_codec("tiered:int8,int4h", o).is_ok());
  EXPECT_EQ(o.codec, KvCodecs(CodecKind::kInt8));
  EXPECT_EQ(o.demotion, (std::vector<CodecKind>{CodecKind::kInt4H}));
  EXPECT_EQ(host_codec_name(o), "tiered:int8,int4h");
  ASSERT_TRUE(parse_host_codec("tiered:bf16,int8,int4h", o).is_ok());
  EXPECT_EQ(o.demotion.size(), 2u);
  ASSERT_TRUE(parse_host_codec("k=int8,v=int4h", o).is_ok());
  EXPECT_TRUE(o.demotion.empty()) << "a plain codec clears an earlier ladder";
  EXPECT_EQ(host_codec_name(o), "k=int8,v=int4h");
  for (const char* bad : {"tiered:int8", "tiered:int4h,int8", "tiered:int8,fp8", "tiered:int8,,int4h", "tiered:",
                          "tiered:int8,int9"}) {
    const Status st = parse_host_codec(bad, o);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
  }
}

// Qwen3-8B: int8 74,880 B/token, int4h 41,472. The granule is an int4h
// token; an int8 token takes two, 8,064 B of them padding. Capacity counts
// rung-0 tokens in the padded size.
TEST(TieredPool, GranulesAreLastRungTokensAndCapacityCountsTheTopRung) {
  HostKvPoolOptions o;
  ASSERT_TRUE(parse_host_codec("tiered:int8,int4h", o).is_ok());
  o.size_bytes = 100 * 82'944 + 41'471;  // 100 padded int8 tokens and not quite one int4h token more
  o.populate = false;
  auto pool = HostKvPool::create(*resolve_model_geometry("qwen3-8b", {}), o, 1000);
  ASSERT_TRUE(pool.is_ok()) << pool.status().to_string();
  HostKvPool& p = **pool;
  EXPECT_TRUE(p.tiered());
  EXPECT_EQ(p.rungs(), 2);
  EXPECT_EQ(p.record_order(), RecordOrder::kTokenMajor);
  EXPECT_EQ(p.granule_bytes(), 41'472u);
  EXPECT_EQ(p.bytes_per_token(0), 74'880u);
  EXPECT_EQ(p.bytes_per_token(1), 41'472u);
  EXPECT_EQ(p.token_stride(0), 82'944u);
  EXPECT_EQ(p.token_stride(1), 41'472u);
  EXPECT_EQ(p.span(0), 2u);
  EXPECT_EQ(p.span(1), 1u);
  EXPECT_EQ(p.capacity_tokens(), 100u);
  EXPECT_EQ(p.num_slots(), 200u);
  EXPECT_EQ(p.reserved_bytes(), 100u * 82'944);
  EXPECT_EQ(p.record_stride(KvPart::kK), 41'472u);
  EXPECT_EQ(p.codec_spec(), "tiered:int8,int4h");
  // Full of int8, then every token demoted: room for exactly as many int4h
  // tokens as an int4h pool of the same bytes holds.
  auto top = p.allocate(100, 0);
  ASSERT_TRUE(top.is_ok());
  EXPECT_EQ(p.free_tokens(0), 0u);
  ASSERT_TRUE(p.shrink(*top, 1).is_ok());
  EXPECT_EQ(p.used_tokens(1), 100u);
  EXPECT_EQ(p.free_bytes(), 100u * 41'472);
  auto more = p.allocate(p.free_tokens(1), 1);
  ASSERT_TRUE(more.is_ok()) << more.status().to_string();
  EXPECT_EQ(100 + more->size(), 200u);
  EXPECT_TRUE(p.check_slots().is_ok());

  HostKvPoolOptions single;
  ASSERT_TRUE(parse_host_codec("int4h", single).is_ok());
  single.size_bytes = o.size_bytes;
  single.populate = false;
  auto int4h = HostKvPool::create(*resolve_model_geometry("qwen3-8b", {}), single, 1000);
  ASSERT_TRUE(int4h.is_ok());
  EXPECT_EQ((*int4h)->capacity_tokens(), 200u) << "the ladder's last rung holds what int4h alone does";
}

// Each rung's bytes rounded up to whole last-rung tokens; a rung smaller
// than the last cannot be laid out so.
TEST(TieredPool, LadderStridesAreWholeLastRungTokens) {
  const size_t three[] = {147'456, 74'880, 41'472};
  auto strides = ladder_token_strides(three);
  ASSERT_TRUE(strides.is_ok());
  EXPECT_EQ(*strides, (std::vector<size_t>{165'888, 82'944, 41'472}));
  const size_t one[] = {74'880};
  EXPECT_EQ(*ladder_token_strides(one), std::vector<size_t>{74'880});
  const size_t exact[] = {96, 48, 24};
  EXPECT_EQ(*ladder_token_strides(exact), (std::vector<size_t>{96, 48, 24})) << "no padding where none is needed";
  const size_t upside_down[] = {41'472, 74'880};
  EXPECT_EQ(ladder_token_strides(upside_down).status().code(), StatusCode::kInvalidArgument);
}

// Sizes a pool cannot take are refused before anything is multiplied or
// reserved: a token count whose granules overflow, a ratio past 2^32 slots,
// and a ladder whose rungs the record alignment pads to one size.
TEST(TieredPool, SizesTooLargeAndLaddersThatFreeNothingAreRefused) {
  const KvGeometry g = *resolve_model_geometry("qwen3-8b", {});
  HostKvPoolOptions o;
  ASSERT_TRUE(parse_host_codec("tiered:bf16,int8,int4h", o).is_ok());
  o.populate = false;
  o.capacity_tokens = uint64_t{1} << 62;  // × 4 granules wraps to 0
  EXPECT_EQ(HostKvPool::create(g, o, 1000).status().code(), StatusCode::kOutOfRange);
  o.capacity_tokens = (uint64_t{1} << 32) / 4;  // 2^32 granules: one too many
  EXPECT_EQ(HostKvPool::create(g, o, 1000).status().code(), StatusCode::kOutOfRange);
  o.capacity_tokens = 0;
  o.ratio = 1e30;
  EXPECT_EQ(HostKvPool::create(g, o, 1000).status().code(), StatusCode::kOutOfRange);

  HostKvPoolOptions padded;
  ASSERT_TRUE(parse_host_codec("tiered:bf16,int8,int4h", padded).is_ok());
  padded.record_align = 2048;  // every record 2,048 B, whatever its codec
  padded.populate = false;
  const Status st = HostKvPool::create(g, padded, 1000).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("free nothing"), std::string::npos) << st.to_string();
}

// A ladder's last rung never meets fragmentation: whatever tokens of every
// rung came and went, in whatever order, an allocation at the last rung
// fails only when the free granules are fewer than its tokens.
TEST(TieredPool, TheLastRungNeverFindsRunsTooShort) {
  for (const char* spec : {"tiered:int8,int4h", "tiered:bf16,int8,int4h", "tiered:fp8,int4"}) {
    HostKvPoolOptions o;
    ASSERT_TRUE(parse_host_codec(spec, o).is_ok());
    o.capacity_tokens = 256;
    o.populate = false;
    auto pool = HostKvPool::create(*resolve_model_geometry("qwen3-8b", {}), o, 256);
    ASSERT_TRUE(pool.is_ok()) << spec << ": " << pool.status().to_string();
    HostKvPool& p = **pool;
    const int last = p.rungs() - 1;
    std::mt19937 rng(7);
    std::vector<std::vector<SlotId>> held;
    for (int step = 0; step < 4000; ++step) {
      const auto n = std::uniform_int_distribution<size_t>(1, 24)(rng);
      const int rung = std::uniform_int_distribution<int>(0, last)(rng);
      const int action = std::uniform_int_distribution<int>(0, 3)(rng);
      if (action == 0 && !held.empty()) {  // free a node
        const size_t i = std::uniform_int_distribution<size_t>(0, held.size() - 1)(rng);
        ASSERT_TRUE(p.free(held[i]).is_ok());
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
      } else if (action == 1 && !held.empty()) {  // demote a node one rung
        const size_t i = std::uniform_int_distribution<size_t>(0, held.size() - 1)(rng);
        const int from = p.rung_of(held[i].front());
        if (from == last) continue;
        const std::vector<SlotId> to = p.demoted_slots(held[i], from, from + 1);
        ASSERT_TRUE(p.shrink(held[i], from + 1).is_ok());
        held[i] = to;
      } else {
        const size_t room = p.free_tokens(last);
        auto slots = p.allocate(n, rung);
        if (rung == last) {
          ASSERT_EQ(slots.is_ok(), n <= room) << spec << " step " << step;
        }
        if (slots.is_ok()) held.push_back(std::move(*slots));
      }
    }
    EXPECT_TRUE(p.check_slots().is_ok()) << spec;
  }
}

// The allocator against a model: every allocated token's granules, rung and
// pins, through random allocations of every rung, frees, pins and shrinks.
TEST(HostSlotAllocator, RandomisedAgainstAModel) {
  const std::vector<uint32_t> spans = {5, 3, 2};
  HostSlotAllocator a(600, spans);
  std::mt19937 rng(7);
  std::map<SlotId, int> owned;                  // slot → rung
  std::map<SlotId, int> pins;                   // slot → pins
  std::vector<std::vector<SlotId>> groups;      // allocations (nodes), token order
  size_t failures = 0, shrinks = 0;
  for (int step = 0; step < 4000; ++step) {
    const auto action = rng() % 8;
    if (action < 3) {
      const int rung = static_cast<int>(rng() % 3);
      const size_t n = 1 + rng() % 12;
      const uint64_t free_before = a.free_granules();
      auto slots = a.allocate(n, rung);
      if (!slots) {
        ++failures;
        ASSERT_EQ(a.free_granules(), free_before) << "a failed allocation took granules";
        continue;
      }
      ASSERT_EQ(slots->size(), n);
      for (SlotId s : *slots) {
        ASSERT_TRUE(owned.emplace(s, rung).second) << "slot " << s << " handed out twice";
        ASSERT_EQ(a.rung_of(s), rung);
      }
      groups.push_back(*slots);
    } else if (action < 5 && !groups.empty()) {
      const size_t g = rng() % groups.size();
      for (SlotId s : groups[g]) owned.erase(s);
      ASSERT_TRUE(a.free(groups[g]).is_ok());
      groups.erase(groups.begin() + static_cast<std::ptrdiff_t>(g));
    } else if (action == 5 && !groups.empty()) {
      const size_t g = rng() % groups.size();
      const int rung = a.rung_of(groups[g].front());
      if (rung + 1 >= 3 || a.any_pinned(groups[g])) continue;
      const std::vector<SlotId> moved = HostSlotAllocator::compacted(groups[g], spans[rung], spans[rung + 1]);
      ASSERT_TRUE(a.shrink(groups[g], rung + 1).is_ok());
      for (SlotId s : groups[g]) owned.erase(s);
      for (SlotId s : moved) owned.emplace(s, rung + 1);
      groups[g] = moved;
      ++shrinks;
    } else if (action == 6 && !groups.empty()) {
      const auto& g = groups[rng() % groups.size()];
      ASSERT_TRUE(a.pin(std::span(g).first(1)).is_ok());
      ++pins[g.front()];
    } else if (!pins.empty()) {
      const SlotId s = pins.begin()->first;
      ASSERT_TRUE(a.unpin(std::span(&s, 1)).is_ok());
      if (--pins.begin()->second == 0) pins.erase(pins.begin());
    }
    // The model: no two tokens' granules overlap, and the counts agree.
    uint64_t granules = 0;
    SlotId end = 0;
    for (const auto& [s, rung] : owned) {
      ASSERT_GE(s, end) << "tokens overlap at " << s;
      end = s + spans[static_cast<size_t>(rung)];
      granules += spans[static_cast<size_t>(rung)];
    }
    ASSERT_EQ(a.used_tokens(), owned.size());
    ASSERT_LE(granules, 600 - a.free_granules()) << "released (pinned) slots still hold theirs";
    const Status st = a.check();
    ASSERT_TRUE(st.is_ok()) << "step " << step << ": " << st.to_string();
  }
  EXPECT_GT(failures, 0u) << "the region never filled";
  EXPECT_GT(shrinks, 100u);
  for (const auto& g : groups) ASSERT_TRUE(a.free(g).is_ok());
  for (const auto& [s, n] : pins)
    for (int i = 0; i < n; ++i) ASSERT_TRUE(a.unpin(std::span(&s, 1)).is_ok());
  EXPECT_EQ(a.free_granules(), 600u);
  EXPECT_EQ(a.used_tokens(), 0u);
}

TEST(HostSlotAllocator, BadFreesShrinksAndPinsChangeNothing) {
  HostSlotAllocator a(100, {4, 2});
  auto slots = *a.allocate(3, 0);
  EXPECT_EQ(a.free(std::vector<SlotId>{slots[0], slots[0]}).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(a.free(std::vector<SlotId>{slots[0] + 1}).code(), StatusCode::kFailedPrecondition) << "inside a token";
  EXPECT_EQ(a.shrink(slots, 0).code(), StatusCode::kFailedPrecondition) << "not a lower rung";
  ASSERT_TRUE(a.pin(std::span(slots).first(1)).is_ok());
  EXPECT_EQ(a.shrink(slots, 1).code(), StatusCode::kFailedPrecondition) << "pinned";
  EXPECT_EQ(a.unpin(std::span(slots).subspan(1, 1)).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(a.used_tokens(), 3u);
  EXPECT_TRUE(a.check().is_ok());
  // A pinned slot freed by its owner is released, and free at its last unpin.
  ASSERT_TRUE(a.free(slots).is_ok());
  EXPECT_EQ(a.released_pinned_count(), 1u);
  EXPECT_EQ(a.free_granules(), 96u);
  ASSERT_TRUE(a.unpin(std::span(slots).first(1)).is_ok());
  EXPECT_EQ(a.free_granules(), 100u);
  EXPECT_TRUE(a.check().is_ok());
}

KvGeometry small_geometry() {
  return *geometry_from_config_json(
      R"({"model_type": "qwen3", "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 64})",
      "small");
}

void fill_rows(DeviceKvPool& l1, std::span<const SlotId> slots, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int layer = 0; layer < l1.geometry().num_layers; ++layer)
    for (KvPart part : {KvPart::kK, KvPart::kV})
      for (SlotId s : slots) {
        uint16_t* row = l1.row(layer, part, s);
        for (size_t i = 0; i < l1.row_elements(part); ++i) row[i] = numeric::float_to_bf16(normal(rng));
      }
}

// Demotes in place, then restores a prefix whose tokens lie on two rungs in
// one load: each token is its rung's round trip, rung 1's of rung 0's.
TEST(Demotion, InPlaceRecordsDecodeAsTheLowerRungsRoundTripInAMixedLoad) {
  const KvGeometry g = small_geometry();
  auto l1 = *make_host_memory_device_pool(g, 64);
  HostKvPoolOptions o;
  ASSERT_TRUE(parse_host_codec("tiered:bf16,int8,int4h", o).is_ok());
  o.capacity_tokens = 48;
  auto l2 = *HostKvPool::create(g, o, 64);
  auto engine = *make_cpu_transfer_engine(*l1, *l2);

  const auto l1_slots = *l1->allocator().allocate(24);
  fill_rows(*l1, l1_slots, 3);
  auto a = *l2->allocate(8, 0), b = *l2->allocate(8, 0), c = *l2->allocate(8, 0);
  std::vector<SlotId> all = a;
  all.insert(all.end(), b.begin(), b.end());
  all.insert(all.end(), c.begin(), c.end());
  ASSERT_TRUE(engine->wait(*engine->backup(l1_slots, all)).is_ok());
  engine->poll();

  // b down one rung, c down two, through the engine on threads.
  DemotionEngine demoter(*l2, {.threads = 2, .codec_impl = CodecImpl::kAuto, .backend = {}, .before_job = {}});
  const auto demote = [&](std::vector<SlotId>& slots, int from) {
    DemotionJob job{slots, l2->demoted_slots(slots, from, from + 1), from, from + 1};
    const Ticket t = demoter.submit(job);
    ASSERT_TRUE(demoter.wait(t).is_ok());
    ASSERT_TRUE(l2->shrink(slots, from + 1).is_ok());
    slots = job.to;
  };
  demote(b, 0);
  demote(c, 0);
  demote(c, 1);
  EXPECT_EQ(demoter.stats().jobs, 3u);
  EXPECT_TRUE(l2->check_slots().is_ok());

  // One load of a (bf16), b (int8) and c (int4h) together.
  std::vector<SlotId> sources = a;
  sources.insert(sources.end(), b.begin(), b.end());
  sources.insert(sources.end(), c.begin(), c.end());
  const auto restored = *l1->allocator().allocate(24);
  ASSERT_TRUE(engine->wait(*engine->load(sources, restored)).is_ok());

  std::vector<std::byte> record(8192);
  for (int layer = 0; layer < g.num_layers; ++layer)
    for (KvPart part : {KvPart::kK, KvPart::kV})
      for (size_t i = 0; i < 24; ++i) {
        const int rung = i < 8 ? 0 : i < 16 ? 1 : 2;
        const size_t n = l1->row_elements(part);
        std::vector<uint16_t> expected(l1->row(layer, part, l1_slots[i]), l1->row(layer, part, l1_slots[i]) + n);
        for (int r = 0; r <= rung; ++r) {
          encode_rows(l2->layout(part, r), expected.data(), n, 1, record.data());
          decode_rows(l2->layout(part, r), record.data(), 1, expected.data(), n);
        }
        ASSERT_EQ(std::memcmp(l1->row(layer, part, restored[i]), expected.data(), n * 2), 0)
            << "token " << i << " (rung " << rung << "), layer " << layer;
      }
  const TransferStats ts = engine->stats();
  EXPECT_EQ(ts.load_bytes, 8 * (l2->bytes_per_token(0) + l2->bytes_per_token(1) + l2->bytes_per_token(2)));
}

// A tiered:int8,int4h pool of `tokens` holding random bytes (every record
// decodes to something): the same bytes for the same seed.
std::unique_ptr<HostKvPool> random_ladder_pool(size_t tokens, uint32_t seed) {
  HostKvPoolOptions o;
  EXPECT_TRUE(parse_host_codec("tiered:int8,int4h", o).is_ok());
  o.capacity_tokens = tokens;
  auto l2 = *HostKvPool::create(small_geometry(), o, tokens);
  std::mt19937 rng(seed);
  std::byte* base = l2->plane(0, KvPart::kK);
  for (size_t i = 0; i < l2->reserved_bytes(); ++i) base[i] = static_cast<std::byte>(rng());
  return l2;
}

std::vector<std::byte> pool_bytes(HostKvPool& pool) {
  const std::byte* base = pool.plane(0, KvPart::kK);
  return std::vector<std::byte>(base, base + pool.reserved_bytes());
}

TEST(Demotion, AFailedJobWritesNothing) {
  auto l2 = random_ladder_pool(16, 1);
  auto slots = *l2->allocate(8, 0);
  std::byte* base = l2->plane(0, KvPart::kK);
  const std::vector<std::byte> before = pool_bytes(*l2);
  DemotionEngine demoter(*l2, {.threads = 0, .codec_impl = CodecImpl::kAuto, .backend = {},
                               .before_job = [](Ticket) { return unavailable("injected"); }});
  const Ticket t = demoter.submit({slots, l2->demoted_slots(slots, 0, 1), 0, 1});
  EXPECT_EQ(demoter.wait(t).code(), StatusCode::kUnavailable);
  EXPECT_EQ(std::memcmp(base, before.data(), before.size()), 0);
  EXPECT_EQ(demoter.stats().failed_jobs, 1u);
  EXPECT_EQ(demoter.poll().size(), 1u);
  EXPECT_EQ(demoter.wait(t).code(), StatusCode::kNotFound) << "handed back by poll";
}

// A job's runs: maximal stretches whose old and new records are each one
// block, covering the job in order; a hole in the slots starts a new run.
TEST(Demotion, RunsAreMaximalBlocksOfOldAndNewRecords) {
  const KvGeometry g = small_geometry();
  HostKvPoolOptions o;
  ASSERT_TRUE(parse_host_codec("tiered:int8,int4h", o).is_ok());
  o.capacity_tokens = 40;
  auto l2 = *HostKvPool::create(g, o, 40);
  auto a = *l2->allocate(6, 0), hole = *l2->allocate(4, 0), b = *l2->allocate(5, 0);
  std::vector<SlotId> slots = a;
  slots.insert(slots.end(), b.begin(), b.end());  // two runs: a, then b past the hole
  const DemotionJob job{slots, l2->demoted_slots(slots, 0, 1), 0, 1};
  ASSERT_TRUE(check_demotion_job(*l2, job).is_ok());
  const std::vector<DemotionRun> runs = demotion_runs(*l2, job);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].begin, 0u);
  EXPECT_EQ(runs[0].count, 6u);
  EXPECT_EQ(runs[1].begin, 6u);
  EXPECT_EQ(runs[1].count, 5u);
  const size_t from_span = l2->span(0), to_span = l2->span(1);
  for (const DemotionRun& r : runs) {
    EXPECT_LE(job.to[r.begin], job.from[r.begin]) << "a run's new records start at or before its old ones";
    for (size_t i = r.begin + 1; i < r.begin + r.count; ++i) {
      EXPECT_EQ(job.from[i], job.from[i - 1] + from_span);
      EXPECT_EQ(job.to[i], job.to[i - 1] + to_span);
    }
  }
  EXPECT_TRUE(demotion_runs(*l2, DemotionJob{{}, {}, 0, 1}).empty());

  EXPECT_EQ(check_demotion_job(*l2, DemotionJob{slots, {}, 0, 1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(check_demotion_job(*l2, DemotionJob{slots, job.to, 1, 1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(check_demotion_job(*l2, DemotionJob{slots, job.to, 0, 2}).code(), StatusCode::kInvalidArgument);
  (void)hole;
}

// The engine runs its backend on the workers (a CUDA server's GPU demoter);
// a backend's failure fails the job as the default one's would.
TEST(Demotion, TheEngineRunsItsBackendInsteadOfTheCpuCodecs) {
  auto l2 = random_ladder_pool(32, 3);
  auto a = *l2->allocate(8, 0), b = *l2->allocate(8, 0);
  std::atomic<int> calls{0};
  std::vector<std::byte> scratch;
  DemotionBackend backend = [&](const DemotionJob& job) {
    ++calls;
    if (job.from == b) return unavailable("injected");
    return demote_records(*l2, job, scratch);
  };
  DemotionEngine demoter(*l2, {.threads = 1, .codec_impl = CodecImpl::kAuto, .backend = backend, .before_job = {}});
  const Ticket ta = demoter.submit({a, l2->demoted_slots(a, 0, 1), 0, 1});
  const Ticket tb = demoter.submit({b, l2->demoted_slots(b, 0, 1), 0, 1});
  EXPECT_TRUE(demoter.wait(ta).is_ok());
  EXPECT_EQ(demoter.wait(tb).code(), StatusCode::kUnavailable);
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(demoter.stats().jobs, 1u);
  EXPECT_EQ(demoter.stats().failed_jobs, 1u);
  // a's records are the CPU codecs' demotion of the same bytes; b's are untouched.
  auto copy = random_ladder_pool(32, 3);
  auto ca = *copy->allocate(8, 0);
  ASSERT_EQ(ca, a);
  ASSERT_TRUE(demote_records(*copy, {ca, copy->demoted_slots(ca, 0, 1), 0, 1}, scratch).is_ok());
  EXPECT_TRUE(pool_bytes(*l2) == pool_bytes(*copy));
}

// A queued job can be taken back: it never runs and never completes; one a
// worker has started cannot, and is waited for instead.
TEST(Demotion, AJobNoWorkerStartedCanBeTakenBack) {
  auto l2 = random_ladder_pool(32, 5);
  auto a = *l2->allocate(8, 0), b = *l2->allocate(8, 0);
  const std::byte* base = l2->plane(0, KvPart::kK);
  const std::vector<std::byte> before = pool_bytes(*l2);
  // The one worker holds the first job until the test opens the gate (or 30 s pass).
  std::mutex mu;
  std::condition_variable cv;
  bool started = false, open = false;
  DemotionEngine demoter(*l2, {.threads = 1, .codec_impl = CodecImpl::kAuto, .backend = {}, .before_job = [&](Ticket) {
                                 std::unique_lock lock(mu);
                                 started = true;
                                 cv.notify_all();
                                 cv.wait_for(lock, std::chrono::seconds(30), [&] { return open; });
                                 return Status::ok();
                               }});
  const Ticket ta = demoter.submit({a, l2->demoted_slots(a, 0, 1), 0, 1});
  const Ticket tb = demoter.submit({b, l2->demoted_slots(b, 0, 1), 0, 1});
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return started; }));
  }
  EXPECT_FALSE(demoter.cancel(ta)) << "a worker has it";
  // A thread waiting for b when it is taken back (or about to wait) is told so.
  Status waited;
  std::thread waiter([&] { waited = demoter.wait(tb); });
  EXPECT_TRUE(demoter.cancel(tb));
  waiter.join();
  EXPECT_EQ(waited.code(), StatusCode::kNotFound);
  EXPECT_FALSE(demoter.cancel(tb)) << "already taken back";
  EXPECT_FALSE(demoter.cancel(12345));
  EXPECT_EQ(demoter.wait(tb).code(), StatusCode::kNotFound);
  {
    std::lock_guard lock(mu);
    open = true;
  }
  cv.notify_all();
  EXPECT_TRUE(demoter.wait(ta).is_ok());
  demoter.drain();
  const std::vector<DemotionCompletion> done = demoter.poll();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].ticket, ta);
  EXPECT_EQ(demoter.stats().jobs, 1u);
  EXPECT_EQ(demoter.stats().cancelled_jobs, 1u);
  // b's records are as they were.
  const size_t b_begin = size_t{b.front()} * l2->granule_bytes(), b_bytes = b.size() * l2->bytes_per_token(0);
  EXPECT_EQ(std::memcmp(base + b_begin, before.data() + b_begin, b_bytes), 0);
}

// The GPU demoter's order of work, done here with the CPU codecs: a chunk's
// old records read (its pieces, copied out), re-encoded into staging, then
// its pieces' new records written over the pool, chunk after chunk; or
// stopped at a chunk and finished by demote_records from there. Whatever
// the chunk size and wherever it stops, the pool is demote_records' result.
TEST(Demotion, ChunkByChunkInPlaceWritesGiveTheWholeJobsResult) {
  for (const char* ladder : {"tiered:int8,int4h", "tiered:bf16,int8,int4h"}) {
    SCOPED_TRACE(ladder);
    // Random blocks; jobs take every other block, so most lie in several runs.
    const auto make = [&] {
      HostKvPoolOptions o;
      EXPECT_TRUE(parse_host_codec(ladder, o).is_ok());
      o.capacity_tokens = 200;
      auto pool = *HostKvPool::create(small_geometry(), o, 200);
      std::mt19937 rng(11);
      std::byte* base = pool->plane(0, KvPart::kK);
      for (size_t i = 0; i < pool->reserved_bytes(); ++i) base[i] = static_cast<std::byte>(rng());
      std::vector<std::vector<SlotId>> blocks;
      for (size_t i = 0; i < 24; ++i) blocks.push_back(*pool->allocate(1 + rng() % 9, 0));
      std::vector<DemotionJob> jobs;
      for (size_t first = 0; first < 2; ++first)
        for (size_t j = first; j + 4 < blocks.size(); j += 6) {
          std::vector<SlotId> slots;
          for (size_t k = j; k < j + 6 && k < blocks.size(); k += 2)
            slots.insert(slots.end(), blocks[k].begin(), blocks[k].end());
          jobs.push_back({slots, pool->demoted_slots(slots, 0, 1), 0, 1});
        }
      return std::make_pair(std::move(pool), std::move(jobs));
    };
    auto [reference, reference_jobs] = make();
    std::vector<std::byte> scratch;
    size_t multi_run = 0;
    for (const DemotionJob& job : reference_jobs) {
      ASSERT_TRUE(demote_records(*reference, job, scratch).is_ok());
      multi_run += demotion_runs(*reference, job).size() > 1;
    }
    ASSERT_GT(multi_run, 0u) << "no job lies in several runs";
    const std::vector<std::byte> expected = pool_bytes(*reference);
    for (size_t chunk : {1, 3, 7, 64})
      for (size_t stop : {size_t{0}, size_t{1}, size_t{1000}}) {  // the chunk the "GPU" fails at (1000: none)
        SCOPED_TRACE("chunk " + std::to_string(chunk) + ", stop " + std::to_string(stop));
        auto [pool, jobs] = make();
        std::byte* base = pool->plane(0, KvPart::kK);
        const KvGeometry& g = pool->geometry();
        for (const DemotionJob& job : jobs) {
          const size_t from_bytes = pool->token_stride(0), to_bytes = pool->token_stride(1);  // a run's tokens apart
          const size_t granule = pool->granule_bytes();
          const std::vector<DemotionChunk> chunks = demotion_chunks(demotion_runs(*pool, job), job.from.size(), chunk);
          size_t done = 0;
          for (size_t index = 0; index < chunks.size() && index < stop; ++index) {
            const DemotionChunk& c = chunks[index];
            ASSERT_EQ(c.begin, done);
            size_t covered = c.begin;
            std::vector<std::byte> old((c.end - c.begin) * from_bytes), fresh((c.end - c.begin) * to_bytes);
            for (const DemotionPiece& p : c.pieces) {
              ASSERT_EQ(p.begin, covered) << "pieces cover the chunk in order";
              covered = p.end;
              std::memcpy(old.data() + (p.begin - c.begin) * from_bytes, base + size_t{job.from[p.begin]} * granule,
                          (p.end - p.begin) * from_bytes);
            }
            ASSERT_EQ(covered, c.end);
            for (int layer = 0; layer < g.num_layers; ++layer)
              for (KvPart part : {KvPart::kK, KvPart::kV})
                transcode_rows(pool->layout(part, 0), old.data() + (pool->plane(layer, part, 0) - base), from_bytes,
                               pool->layout(part, 1), fresh.data() + (pool->plane(layer, part, 1) - base), to_bytes,
                               c.end - c.begin);
            for (const DemotionPiece& p : c.pieces)
              for (size_t i = p.begin; i < p.end; ++i)  // records only, as the GPU demoter writes them
                std::memcpy(base + size_t{job.to[i]} * granule, fresh.data() + (i - c.begin) * to_bytes,
                            pool->bytes_per_token(1));
            done = c.end;
          }
          const auto rest = static_cast<std::ptrdiff_t>(done);
          ASSERT_TRUE(demote_records(*pool, {{job.from.begin() + rest, job.from.end()},
                                             {job.to.begin() + rest, job.to.end()}, 0, 1}, scratch).is_ok());
        }
        EXPECT_TRUE(pool_bytes(*pool) == expected);
      }
  }
}

}  // namespace
}  // namespace hiq
