// The pools and their slot allocator: all-or-nothing allocation, double
// alloc/free caught with nothing changed, plane layouts that never overlap, L2
// capacity from encoded bytes, and budgets the machine cannot hold.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>

#include "kv/model_config.h"
#include "memory/device_kv_pool.h"
#include "memory/host_kv_pool.h"
#include "memory/mapped_region.h"
#include "memory/slot_allocator.h"

namespace hiq {
namespace {

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

KvGeometry preset(const std::string& name, int page_size = 1) {
  GeometryOptions options;
  options.page_size = page_size;
  return *resolve_model_geometry(name, options);
}

// ---- SlotAllocator ------------------------------------------------------------------

TEST(SlotAllocator, AllocatesAllOrNothing) {
  SlotAllocator a(10);
  auto first = a.allocate(7);
  ASSERT_TRUE(first.is_ok());
  EXPECT_EQ(*first, (std::vector<SlotId>{0, 1, 2, 3, 4, 5, 6}));
  auto too_many = a.allocate(4);
  EXPECT_EQ(too_many.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(contains(too_many.status().message(), "3 of 10 are free"));
  EXPECT_EQ(a.free_count(), 3u);
  EXPECT_EQ(a.allocate(3)->size(), 3u);
  EXPECT_EQ(a.free_count(), 0u);
  EXPECT_TRUE(a.allocate(0).is_ok());
}

TEST(SlotAllocator, DoubleFreeAndStrangersChangeNothing) {
  SlotAllocator a(8);
  auto slots = *a.allocate(4);  // 0..3
  const std::vector<SlotId> bad_lists[] = {{1, 1}, {2, 5}, {0, 3, 99}, {7}};
  for (const auto& bad : bad_lists) {
    const Status st = a.free(bad);
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.to_string();
    EXPECT_EQ(a.used_count(), 4u);
    for (SlotId s : slots) EXPECT_TRUE(a.is_allocated(s));
  }
  EXPECT_TRUE(contains(a.free(std::vector<SlotId>{2, 2}).message(), "double free of slot 2"));
  EXPECT_TRUE(contains(a.free(std::vector<SlotId>{42}).message(), "beyond"));
  ASSERT_TRUE(a.free(slots).is_ok());
  EXPECT_EQ(a.free_count(), 8u);
  EXPECT_EQ(a.free(slots).code(), StatusCode::kFailedPrecondition);  // now every one is a double free
}

TEST(SlotAllocator, APinnedSlotFreedByItsOwnerIsFreeOnlyAfterItsLastPin) {
  SlotAllocator a(4);
  const auto slots = *a.allocate(4);  // 0..3
  ASSERT_TRUE(a.pin(std::vector<SlotId>{1, 2, 2}).is_ok());  // slot 2 twice
  ASSERT_TRUE(a.free(slots).is_ok());  // the owner lets go of all four
  EXPECT_FALSE(a.is_allocated(1));     // ownership ends at once
  EXPECT_EQ(a.free_count(), 2u);       // 0 and 3; 1 and 2 are still pinned
  EXPECT_EQ(a.released_pinned_count(), 2u);
  EXPECT_EQ(a.allocate(3).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(a.free(std::vector<SlotId>{1}).code(), StatusCode::kFailedPrecondition);  // still a double free
  ASSERT_TRUE(a.unpin(std::vector<SlotId>{1, 2}).is_ok());
  EXPECT_EQ(a.free_count(), 3u);  // 1 is free; 2 has a pin left
  ASSERT_TRUE(a.unpin(std::vector<SlotId>{2}).is_ok());
  EXPECT_EQ(a.free_count(), 4u);
  EXPECT_EQ(a.released_pinned_count(), 0u);
}

TEST(SlotAllocator, BadPinsAndUnpinsChangeNothing) {
  SlotAllocator a(4);
  const auto slots = *a.allocate(2);  // 0, 1
  EXPECT_EQ(a.pin(std::vector<SlotId>{0, 3}).code(), StatusCode::kFailedPrecondition);  // 3 is free
  EXPECT_EQ(a.unpin(std::vector<SlotId>{0}).code(), StatusCode::kFailedPrecondition);   // the pin of 0 did not happen
  ASSERT_TRUE(a.pin(std::vector<SlotId>{0, 1}).is_ok());
  ASSERT_TRUE(a.free(slots).is_ok());
  // 1 listed twice has one pin: nothing changes, 0 keeps its pin.
  EXPECT_EQ(a.unpin(std::vector<SlotId>{0, 1, 1}).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(a.free_count(), 2u);
  EXPECT_EQ(a.unpin(std::vector<SlotId>{9}).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(a.unpin(std::vector<SlotId>{0, 1}).is_ok());
  EXPECT_EQ(a.free_count(), 4u);
}

TEST(SlotAllocator, RandomisedAgainstASetModel) {
  SlotAllocator a(257);
  std::set<SlotId> model;
  std::vector<SlotId> held;
  std::mt19937 rng(3);
  for (int step = 0; step < 20000; ++step) {
    if (rng() % 2 == 0) {
      const size_t n = rng() % 20;
      auto got = a.allocate(n);
      if (n > 257 - model.size()) {
        ASSERT_FALSE(got.is_ok());
        continue;
      }
      ASSERT_TRUE(got.is_ok());
      ASSERT_EQ(got->size(), n);
      for (SlotId s : *got) {
        ASSERT_TRUE(model.insert(s).second) << "slot " << s << " handed out twice";
        held.push_back(s);
      }
    } else if (!held.empty()) {
      std::shuffle(held.begin(), held.end(), rng);
      const size_t n = 1 + rng() % std::min<size_t>(held.size(), 20);
      std::vector<SlotId> give(held.end() - static_cast<std::ptrdiff_t>(n), held.end());
      held.resize(held.size() - n);
      ASSERT_TRUE(a.free(give).is_ok());
      for (SlotId s : give) model.erase(s);
    }
    ASSERT_EQ(a.used_count(), model.size());
  }
  for (SlotId s = 0; s < 257; ++s) ASSERT_EQ(a.is_allocated(s), model.count(s) == 1);
}

// ---- MappedRegion ---------------------------------------------------------------------

TEST(MappedRegion, ZeroedAndMovable) {
  auto region = MappedRegion::reserve(1 << 20, true);
  ASSERT_TRUE(region.is_ok());
  for (size_t i = 0; i < region->size(); i += 4096) ASSERT_EQ(region->data()[i], std::byte{0});
  std::byte* data = region->data();
  MappedRegion moved = std::move(*region);
  EXPECT_EQ(moved.data(), data);
  EXPECT_EQ(region->data(), nullptr);
}

TEST(MappedRegion, MoreThanTheMachineHasFailsAtOnceWithAReason) {
  auto available = available_memory_bytes();
  if (!available) GTEST_SKIP() << available.status().message();
  auto region = MappedRegion::reserve(*available + (size_t{64} << 30), true);
  ASSERT_FALSE(region.is_ok());
  EXPECT_EQ(region.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(contains(region.status().message(), "available")) << region.status().message();
}

// ---- DeviceKvPool (host memory) ----------------------------------------------------------

TEST(DeviceKvPool, PlanesAreDisjointAndCoverThePool) {
  for (const char* name : {"qwen3-0.6b", "deepseek-v2-lite"}) {
    const KvGeometry g = preset(name);
    auto pool = make_host_memory_device_pool(g, 37);
    ASSERT_TRUE(pool.is_ok()) << pool.status().to_string();
    DeviceKvPool& p = **pool;
    EXPECT_EQ(p.bytes(), 37 * g.l1_bytes_per_token());
    EXPECT_TRUE(p.host_accessible());
    const int parts = g.rows_per_layer();
    // Stamp every row with its (layer, part, slot), then check no stamp was overwritten.
    for (int layer = 0; layer < g.num_layers; ++layer)
      for (int part = 0; part < parts; ++part)
        for (SlotId s = 0; s < 37; ++s) {
          uint16_t* row = p.row(layer, static_cast<KvPart>(part), s);
          const size_t n = p.row_elements(static_cast<KvPart>(part));
          for (size_t i = 0; i < n; ++i) row[i] = static_cast<uint16_t>(layer * 4099 + part * 131 + s);
        }
    for (int layer = 0; layer < g.num_layers; ++layer)
      for (int part = 0; part < parts; ++part)
        for (SlotId s = 0; s < 37; ++s) {
          const uint16_t* row = p.row(layer, static_cast<KvPart>(part), s);
          const size_t n = p.row_elements(static_cast<KvPart>(part));
          for (size_t i = 0; i < n; ++i) ASSERT_EQ(row[i], static_cast<uint16_t>(layer * 4099 + part * 131 + s));
        }
    // The last row ends exactly at the end of the pool.
    const int last = g.num_layers - 1;
    const KvPart last_part = static_cast<KvPart>(parts - 1);
    const auto* end = reinterpret_cast<const std::byte*>(p.row(last, last_part, 36) + p.row_elements(last_part));
    EXPECT_EQ(end - reinterpret_cast<const std::byte*>(p.plane(0, KvPart::kK)), static_cast<std::ptrdiff_t>(p.bytes()));
  }
}

TEST(DeviceKvPool, RejectsZeroSlots) {
  auto pool = make_host_memory_device_pool(preset("qwen3-8b"), 0);
  EXPECT_EQ(pool.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(pool.status().message(), "--max-total-tokens"));
}

// read_rows/write_rows: the only way the simulated model reaches L1, on any backend.
TEST(DeviceKvPool, ReadRowsGivesBackWhatWriteRowsWroteToTheNamedSlots) {
  const KvGeometry g = preset("qwen3-0.6b");
  auto pool = make_host_memory_device_pool(g, 37);
  ASSERT_TRUE(pool.is_ok()) << pool.status().to_string();
  DeviceKvPool& p = **pool;
  const std::vector<SlotId> slots = {5, 0, 36, 17};
  for (int layer : {0, g.num_layers - 1})
    for (KvPart part : {KvPart::kK, KvPart::kV}) {
      const size_t n = p.row_elements(part);
      std::vector<uint16_t> rows(slots.size() * n);
      for (size_t i = 0; i < rows.size(); ++i)
        rows[i] = static_cast<uint16_t>(i * 7 + static_cast<size_t>(layer) * 3 + static_cast<size_t>(part));
      ASSERT_TRUE(p.write_rows(layer, part, slots, rows.data()).is_ok());
      // Each row landed in its own slot's place in the plane.
      for (size_t i = 0; i < slots.size(); ++i)
        ASSERT_EQ(std::memcmp(p.row(layer, part, slots[i]), rows.data() + i * n, n * 2), 0) << "slot " << slots[i];
      // Read back in another order, a slot twice, and one never written (zero).
      const std::vector<SlotId> again = {17, 5, 5, 36, 0, 1};
      std::vector<uint16_t> out(again.size() * n, 0xFFFF);
      ASSERT_TRUE(p.read_rows(layer, part, again, out.data()).is_ok());
      const size_t from[] = {3, 0, 0, 2, 1};  // index in `slots` of again[i]
      for (size_t i = 0; i < 5; ++i)
        EXPECT_EQ(std::memcmp(out.data() + i * n, rows.data() + from[i] * n, n * 2), 0) << "row " << i;
      const std::vector<uint16_t> never_written(out.end() - static_cast<std::ptrdiff_t>(n), out.end());
      EXPECT_EQ(never_written, std::vector<uint16_t>(n, 0));
    }
  // Layer 1 was never written: the writes above touched only their own (layer, part).
  std::vector<uint16_t> out(p.row_elements(KvPart::kK), 0xFFFF);
  ASSERT_TRUE(p.read_rows(1, KvPart::kK, std::vector<SlotId>{5}, out.data()).is_ok());
  EXPECT_EQ(out, std::vector<uint16_t>(out.size(), 0));
  // No slots, no work, no error.
  EXPECT_TRUE(p.read_rows(0, KvPart::kK, {}, nullptr).is_ok());
  EXPECT_TRUE(p.write_rows(0, KvPart::kK, {}, nullptr).is_ok());
}

TEST(DeviceKvPool, RowsOfABadLayerOrSlotAreRefusedAndNothingIsCopied) {
  const KvGeometry g = preset("qwen3-0.6b");
  auto pool = make_host_memory_device_pool(g, 37);
  ASSERT_TRUE(pool.is_ok()) << pool.status().to_string();
  DeviceKvPool& p = **pool;
  const size_t n = p.row_elements(KvPart::kK);
  const std::vector<uint16_t> rows(3 * n, 0x3F80);
  std::vector<uint16_t> out(3 * n, 0xFFFF);
  const std::vector<SlotId> good = {0, 1, 2}, bad_slot = {0, 37, 2};
  for (int layer : {-1, g.num_layers}) {
    const Status read = p.read_rows(layer, KvPart::kK, good, out.data());
    EXPECT_EQ(read.code(), StatusCode::kOutOfRange) << read.to_string();
    EXPECT_TRUE(contains(read.message(), "layer " + std::to_string(layer))) << read.message();
    EXPECT_EQ(p.write_rows(layer, KvPart::kV, good, rows.data()).code(), StatusCode::kOutOfRange);
  }
  const Status read = p.read_rows(0, KvPart::kK, bad_slot, out.data());
  EXPECT_EQ(read.code(), StatusCode::kOutOfRange) << read.to_string();
  EXPECT_TRUE(contains(read.message(), "slot 37")) << read.message();
  EXPECT_EQ(out, std::vector<uint16_t>(3 * n, 0xFFFF));  // not even the good slot before it
  const Status write = p.write_rows(0, KvPart::kK, bad_slot, rows.data());
  EXPECT_EQ(write.code(), StatusCode::kOutOfRange) << write.to_string();
  ASSERT_TRUE(p.read_rows(0, KvPart::kK, good, out.data()).is_ok());
  EXPECT_EQ(out, std::vector<uint16_t>(3 * n, 0));  // slot 0 was not written either
}

TEST(DeviceKvPool, MlaPoolHasKRowsAndNoVRows) {
  const KvGeometry g = preset("deepseek-v2-lite");
  auto pool = make_host_memory_device_pool(g, 8);
  ASSERT_TRUE(pool.is_ok()) << pool.status().to_string();
  DeviceKvPool& p = **pool;
  const std::vector<SlotId> slots = {3, 6};
  const size_t n = p.row_elements(KvPart::kK);
  ASSERT_GT(n, 0u);
  EXPECT_EQ(p.row_elements(KvPart::kV), 0u);
  std::vector<uint16_t> rows(2 * n);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<uint16_t>(i + 1);
  ASSERT_TRUE(p.write_rows(g.num_layers - 1, KvPart::kK, slots, rows.data()).is_ok());
  std::vector<uint16_t> out(2 * n);
  ASSERT_TRUE(p.read_rows(g.num_layers - 1, KvPart::kK, slots, out.data()).is_ok());
  EXPECT_EQ(out, rows);
  const Status read_v = p.read_rows(0, KvPart::kV, slots, out.data());
  EXPECT_EQ(read_v.code(), StatusCode::kInvalidArgument) << read_v.to_string();
  EXPECT_TRUE(contains(read_v.message(), "no V")) << read_v.message();
  EXPECT_EQ(p.write_rows(0, KvPart::kV, slots, rows.data()).code(), StatusCode::kInvalidArgument);
}

// ---- HostKvPool -----------------------------------------------------------------------

TEST(HostKvPool, CapacityComesFromEncodedBytes) {
  const KvGeometry g = preset("qwen3-8b");
  HostKvPoolOptions o;
  o.size_bytes = 64'000'000;
  o.codec = CodecKind::kBf16;
  auto bf16 = HostKvPool::create(g, o, 1000);
  o.codec = CodecKind::kInt8;
  auto int8 = HostKvPool::create(g, o, 1000);
  o.record_align = 128;
  auto int8_128 = HostKvPool::create(g, o, 1000);
  ASSERT_TRUE(bf16.is_ok() && int8.is_ok() && int8_128.is_ok());
  EXPECT_EQ((*bf16)->bytes_per_token(), 147456u);
  EXPECT_EQ((*int8)->bytes_per_token(), 74880u);
  EXPECT_EQ((*int8_128)->bytes_per_token(), 82944u);
  EXPECT_EQ((*bf16)->capacity_tokens(), 64'000'000u / 147456u);
  EXPECT_EQ((*int8)->capacity_tokens(), 64'000'000u / 74880u);
  for (const auto* pool : {&*bf16, &*int8, &*int8_128}) {
    // Invariant: what L2 reports it can hold is what it reserved.
    EXPECT_EQ((**pool).reserved_bytes(), (**pool).capacity_tokens() * (**pool).bytes_per_token());
    EXPECT_LE((**pool).reserved_bytes(), o.size_bytes);
    EXPECT_EQ((**pool).num_slots(), (**pool).capacity_tokens());
  }
}

TEST(HostKvPool, KeysAndValuesMayHaveTheirOwnCodec) {
  const KvGeometry g = preset("qwen3-8b");
  HostKvPoolOptions o;
  o.size_bytes = 64'000'000;
  o.codec = KvCodecs(CodecKind::kInt8, CodecKind::kInt4H);
  auto pool = HostKvPool::create(g, o, 1000);
  ASSERT_TRUE(pool.is_ok()) << pool.status().to_string();
  EXPECT_EQ((*pool)->layout(KvPart::kK).codec, CodecKind::kInt8);
  EXPECT_EQ((*pool)->layout(KvPart::kV).codec, CodecKind::kInt4H);
  EXPECT_EQ((*pool)->bytes_per_token(), (1040u + 576u) * 36u);  // int8 rows of 1,040 B, int4h rows of 576 B
  EXPECT_EQ((*pool)->capacity_tokens(), 64'000'000u / ((1040u + 576u) * 36u));
  EXPECT_EQ((*pool)->reserved_bytes(), (*pool)->capacity_tokens() * (*pool)->bytes_per_token());
}

// Token-major: a slot's records are one contiguous run of bytes_per_token,
// slot after slot, whatever the parts' codecs; record() and the strides agree.
TEST(HostKvPool, TokenMajorKeepsATokensRecordsTogether) {
  const KvGeometry g = preset("qwen3-8b");
  HostKvPoolOptions o;
  o.size_bytes = 16'000'000;
  o.codec = KvCodecs(CodecKind::kInt8, CodecKind::kInt4H);
  o.record_order = RecordOrder::kTokenMajor;
  auto pool = HostKvPool::create(g, o, 1000);
  ASSERT_TRUE(pool.is_ok()) << pool.status().to_string();
  HostKvPool& p = **pool;
  EXPECT_EQ(p.record_stride(KvPart::kK), p.bytes_per_token());
  EXPECT_EQ(p.record_stride(KvPart::kV), p.bytes_per_token());
  const std::byte* base = p.plane(0, KvPart::kK);
  for (SlotId slot : {SlotId{0}, SlotId{1}, static_cast<SlotId>(p.capacity_tokens() - 1)}) {
    size_t offset = slot * p.bytes_per_token();
    for (int layer = 0; layer < g.num_layers; ++layer)
      for (KvPart part : {KvPart::kK, KvPart::kV}) {
        ASSERT_EQ(p.record(layer, part, slot) - base, static_cast<std::ptrdiff_t>(offset)) << slot << " " << layer;
        offset += p.layout(part).record_bytes;
      }
    EXPECT_EQ(offset, (slot + 1) * p.bytes_per_token());
  }
  EXPECT_EQ(p.reserved_bytes(), p.capacity_tokens() * p.bytes_per_token());
}

TEST(HostKvPool, RatioOfL1TokensInWholePages) {
  HostKvPoolOptions o;
  o.codec = CodecKind::kInt4;
  o.ratio = 2.5;
  auto pool = HostKvPool::create(preset("qwen3-0.6b", 64), o, 1000);
  ASSERT_TRUE(pool.is_ok()) << pool.status().to_string();
  EXPECT_EQ((*pool)->capacity_tokens(), 2496u);  // 2,500 rounded down to pages of 64
}

TEST(HostKvPool, RecordsOfEveryLayerPartAndSlotAreDisjoint) {
  const KvGeometry g = preset("qwen3-0.6b");
  HostKvPoolOptions o;
  o.codec = CodecKind::kInt8;
  o.ratio = 1;
  auto pool = HostKvPool::create(g, o, 50);
  ASSERT_TRUE(pool.is_ok());
  HostKvPool& p = **pool;
  std::set<std::byte*> starts;
  for (int layer = 0; layer < g.num_layers; ++layer)
    for (KvPart part : {KvPart::kK, KvPart::kV})
      for (SlotId s = 0; s < p.capacity_tokens(); ++s) {
        std::byte* r = p.record(layer, part, s);
        ASSERT_TRUE(starts.insert(r).second);
        ASSERT_GE(r, p.plane(0, KvPart::kK));
        ASSERT_LE(r + p.layout(part).record_bytes, p.plane(0, KvPart::kK) + p.reserved_bytes());
      }
  EXPECT_EQ(starts.size(), p.capacity_tokens() * g.num_layers * 2);
}

TEST(HostKvPool, ClearErrorsForBudgetsAndCodecsThatCannotWork) {
  const KvGeometry g = preset("qwen3-8b");
  HostKvPoolOptions o;
  o.size_bytes = 1000;  // less than one token
  auto tiny = HostKvPool::create(g, o, 10);
  EXPECT_EQ(tiny.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(tiny.status().message(), "--hicache-size")) << tiny.status().message();

  o.size_bytes = 0;
  o.ratio = 0;
  EXPECT_TRUE(contains(HostKvPool::create(g, o, 10).status().message(), "--hicache-ratio"));
  o.ratio = std::nan("");
  EXPECT_TRUE(contains(HostKvPool::create(g, o, 10).status().message(), "--hicache-ratio"));

  GeometryOptions go;
  auto hd96 = geometry_from_config_json(
      R"({"model_type": "llama", "hidden_size": 3072, "num_attention_heads": 32, "num_hidden_layers": 2})", "hd96", go);
  ASSERT_TRUE(hd96.is_ok());
  o.ratio = 1;
  o.codec = CodecKind::kInt4H;
  EXPECT_TRUE(contains(HostKvPool::create(*hd96, o, 10).status().message(), "power-of-two"));

  auto available = available_memory_bytes();
  if (available.is_ok()) {
    HostKvPoolOptions huge;
    huge.size_bytes = *available + (uint64_t{64} << 30);
    auto too_big = HostKvPool::create(g, huge, 10);
    EXPECT_EQ(too_big.status().code(), StatusCode::kResourceExhausted);
    EXPECT_TRUE(contains(too_big.status().message(), "available")) << too_big.status().message();
  }
}

TEST(HostKvPool, MlaHasOnlyKRecords) {
  HostKvPoolOptions o;
  o.codec = CodecKind::kInt8;
  o.size_bytes = 10'000'000;
  auto pool = HostKvPool::create(preset("deepseek-v3"), o, 10);
  ASSERT_TRUE(pool.is_ok()) << pool.status().to_string();
  EXPECT_EQ((*pool)->bytes_per_token(), 61u * 592u);
}

}  // namespace
}  // namespace hiq

namespace hiq {
namespace {

TEST(HostKvPool, Fp16L1TakesOnlyTheCopyingCodec) {
  GeometryOptions go;
  go.l1_dtype = L1Dtype::kFp16;
  const KvGeometry g = *resolve_model_geometry("qwen3-0.6b", go);
  HostKvPoolOptions o;
  o.ratio = 1;
  o.codec = CodecKind::kInt8;
  auto refused = HostKvPool::create(g, o, 16);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("BF16 L1"), std::string::npos);
  o.codec = CodecKind::kBf16;
  EXPECT_TRUE(HostKvPool::create(g, o, 16).is_ok());
}

}  // namespace
}  // namespace hiq
