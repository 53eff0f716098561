// The CUDA backend: the L1 pool in GPU memory, pinned L2 (also above 4 GB),
// and the CUDA transfer engine — records byte-identical to the CPU codecs',
// loads landing exactly the codec's round trip in the right slots, per-layer
// readiness on the host and on a compute stream, backups and loads in flight
// at once, many small interleaved transfers, growth of the slot-list staging
// while transfers are queued, injected failures, and the whole cache +
// scheduler + simulated model on the GPU backend with every read checked.
// Skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>

#include "codec_test_data.h"
#include "cuda/device.h"
#include "gpu_test_policy.h"
#include "engine/simulation.h"
#include "kv/model_config.h"
#include "memory/cuda_device_kv_pool.h"
#include "memory/mapped_region.h"
#include "transfer/cuda_transfer_engine.h"

namespace hiq {
namespace {

KvGeometry geometry(const char* json) { return *geometry_from_config_json(json, "test"); }

// 4 layers × 2 KV heads × 64, and shapes that take the kernels' other paths.
KvGeometry small_geometry() {
  return geometry(R"({"model_type": "qwen3", "num_hidden_layers": 4, "num_attention_heads": 4,
                      "num_key_value_heads": 2, "head_dim": 64})");
}
KvGeometry odd_geometry() {  // head_dim 40: not a multiple of 8
  return geometry(R"({"model_type": "qwen3", "num_hidden_layers": 3, "num_attention_heads": 6,
                      "num_key_value_heads": 3, "head_dim": 40})");
}

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HIQ_SKIP_OR_FAIL_WITHOUT_GPU();
  }
};

struct Tiers {
  std::unique_ptr<DeviceKvPool> l1;
  std::unique_ptr<HostKvPool> l2;
  std::unique_ptr<CudaTransferEngine> engine;
};

Tiers make_tiers(const KvGeometry& g, KvCodecs codec, size_t l1_slots, size_t l2_slots,
                 TransferEngineOptions options = {}, size_t align = kDefaultRecordAlign,
                 RecordOrder order = RecordOrder::kLayerMajor) {
  Tiers t;
  auto l1 = make_cuda_device_kv_pool(g, l1_slots);
  EXPECT_TRUE(l1.is_ok()) << l1.status().to_string();
  HostKvPoolOptions o;
  o.codec = codec;
  o.record_align = align;
  o.record_order = order;
  o.ratio = static_cast<double>(l2_slots) / static_cast<double>(l1_slots);
  auto l2 = HostKvPool::create(g, o, l1_slots);
  EXPECT_TRUE(l2.is_ok()) << l2.status().to_string();
  t.l1 = std::move(*l1);
  t.l2 = std::move(*l2);
  auto engine = make_cuda_transfer_engine(*t.l1, *t.l2, std::move(options));
  EXPECT_TRUE(engine.is_ok()) << engine.status().to_string();
  t.engine = std::move(*engine);
  return t;
}

// Rows written into L1 for some slots: rows[layer * parts + part] holds them slot by slot.
using Rows = std::vector<std::vector<uint16_t>>;

Rows fill(DeviceKvPool& l1, std::span<const SlotId> slots, uint32_t seed,
          testing::RowKind kind = testing::RowKind::kGaussian) {
  Rows written;
  const KvGeometry& g = l1.geometry();
  for (int layer = 0; layer < g.num_layers; ++layer)
    for (int p = 0; p < g.rows_per_layer(); ++p) {
      const auto part = static_cast<KvPart>(p);
      auto rows = testing::make_rows(kind, g.row_shape(part), slots.size(), seed++);
      EXPECT_TRUE(l1.write_rows(layer, part, slots, rows.data()).is_ok());
      written.push_back(std::move(rows));
    }
  return written;
}

Rows read(DeviceKvPool& l1, std::span<const SlotId> slots) {
  Rows out;
  const KvGeometry& g = l1.geometry();
  for (int layer = 0; layer < g.num_layers; ++layer)
    for (int p = 0; p < g.rows_per_layer(); ++p) {
      const auto part = static_cast<KvPart>(p);
      std::vector<uint16_t> rows(slots.size() * l1.row_elements(part), 0xDEAD);
      EXPECT_TRUE(l1.read_rows(layer, part, slots, rows.data()).is_ok());
      out.push_back(std::move(rows));
    }
  return out;
}

// The CPU codec's encoding and round trip of `rows`.
std::vector<std::byte> cpu_records(const RecordLayout& layout, const std::vector<uint16_t>& rows) {
  const size_t n = rows.size() / layout.shape.elements();
  std::vector<std::byte> records(n * layout.record_bytes);
  encode_rows(layout, rows.data(), layout.shape.elements(), n, records.data(), nullptr, CodecImpl::kScalar);
  return records;
}
Rows round_trip(const HostKvPool& l2, const Rows& rows) {
  Rows out;
  const int parts = l2.geometry().rows_per_layer();
  for (size_t i = 0; i < rows.size(); ++i) {
    const RecordLayout& layout = l2.layout(static_cast<KvPart>(static_cast<int>(i) % parts));
    const auto records = cpu_records(layout, rows[i]);
    std::vector<uint16_t> back(rows[i].size());
    decode_rows(layout, records.data(), rows[i].size() / layout.shape.elements(), back.data(), layout.shape.elements(),
                CodecImpl::kScalar);
    out.push_back(std::move(back));
  }
  return out;
}

std::vector<SlotId> iota_slots(size_t n, SlotId first = 0) {
  std::vector<SlotId> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

// ---- pools -----------------------------------------------------------------------

TEST_F(GpuTest, DevicePoolReadsBackWhatWasWrittenAndRejectsBadSlots) {
  const KvGeometry g = small_geometry();
  auto l1 = make_cuda_device_kv_pool(g, 100);
  ASSERT_TRUE(l1.is_ok()) << l1.status().to_string();
  EXPECT_FALSE((*l1)->host_accessible());
  const std::vector<SlotId> slots = {99, 0, 42, 7};
  const Rows written = fill(**l1, slots, 3);
  EXPECT_EQ(read(**l1, slots), written);
  std::vector<uint16_t> row(g.row_shape(KvPart::kK).elements());
  const SlotId bad[] = {100};
  EXPECT_EQ((*l1)->read_rows(0, KvPart::kK, bad, row.data()).code(), StatusCode::kOutOfRange);
  EXPECT_EQ((*l1)->read_rows(4, KvPart::kK, slots, row.data()).code(), StatusCode::kOutOfRange);
}

TEST_F(GpuTest, DevicePoolReportsAnAllocationTooLargeForTheGpu) {
  KvGeometry g = small_geometry();
  auto l1 = make_cuda_device_kv_pool(g, size_t{1} << 31);  // 4 layers × 2 × 128 B × 2^31 = 2 TB
  ASSERT_FALSE(l1.is_ok());
  EXPECT_EQ(l1.status().code(), StatusCode::kResourceExhausted) << l1.status().to_string();
}

TEST_F(GpuTest, PinsAndTransfersIntoAnL2LargerThan4GB) {
  const KvGeometry g = small_geometry();  // 2 KB of bf16 per token
  auto l1 = make_cuda_device_kv_pool(g, 64);
  ASSERT_TRUE(l1.is_ok());
  HostKvPoolOptions o;
  o.codec = CodecKind::kBf16;
  o.size_bytes = (size_t{9} << 29);  // 4.5 GiB
  o.populate = false;
  auto l2 = HostKvPool::create(g, o, 64);
  ASSERT_TRUE(l2.is_ok()) << l2.status().to_string();
  ASSERT_GT((*l2)->reserved_bytes(), size_t{4} << 30);
  auto engine = make_cuda_transfer_engine(**l1, **l2);
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  const std::vector<SlotId> l1_slots = {5, 6};
  const std::vector<SlotId> l2_slots = {static_cast<SlotId>((*l2)->capacity_tokens() - 1), 1};
  const Rows written = fill(**l1, l1_slots, 11);
  auto t = (*engine)->backup(l1_slots, l2_slots);
  ASSERT_TRUE(t.is_ok());
  ASSERT_TRUE((*engine)->wait(*t).is_ok());
  // The last slot of the last layer's V plane: past 4 GiB from the start.
  const std::byte* last = (*l2)->record(g.num_layers - 1, KvPart::kV, l2_slots[0]);
  ASSERT_GT(static_cast<size_t>(last - (*l2)->plane(0, KvPart::kK)), size_t{4} << 30);
  EXPECT_EQ(std::memcmp(last, written.back().data(), g.row_shape(KvPart::kV).elements() * 2), 0);
}

TEST_F(GpuTest, PinsInChunksWhenAskedAndEveryChunkIsMappedAtItsHostAddress) {
  auto region = MappedRegion::reserve((size_t{5} << 29) + 4096, /*populate=*/false);  // 2.5 GiB + a page
  ASSERT_TRUE(region.is_ok()) << region.status().to_string();
  auto pinned = PinnedHostMemory::pin(region->data(), region->size(), size_t{1} << 30);
  ASSERT_TRUE(pinned.is_ok()) << pinned.status().to_string();
  EXPECT_EQ(pinned->size(), region->size());
  EXPECT_EQ(pinned->chunk_bytes(), size_t{1} << 30);
  for (size_t offset : {size_t{0}, (size_t{1} << 30) + 8, region->size() - 16}) {
    cudaPointerAttributes a{};
    ASSERT_EQ(cudaPointerGetAttributes(&a, region->data() + offset), cudaSuccess);
    EXPECT_EQ(a.type, cudaMemoryTypeHost);
    EXPECT_EQ(a.devicePointer, region->data() + offset);
  }
  // A copy engine reaches the last chunk.
  const uint64_t value = 0x0123456789ABCDEFull;
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 8), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device, &value, 8, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(region->data() + region->size() - 8, device, 8, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::memcmp(region->data() + region->size() - 8, &value, 8), 0);
  (void)cudaFree(device);
  PinnedHostMemory moved = std::move(*pinned);  // unregistered once, by `moved`
  EXPECT_EQ(pinned->size(), 0u);
}

// ---- the engine ------------------------------------------------------------------

struct EngineCase {
  KvCodecs codec;
  bool odd_shape;
  size_t align;
  RecordOrder order = RecordOrder::kLayerMajor;
};

class GpuEngineRoundTrip : public ::testing::TestWithParam<EngineCase> {
 protected:
  void SetUp() override {
    HIQ_SKIP_OR_FAIL_WITHOUT_GPU();
  }
};

TEST_P(GpuEngineRoundTrip, BackupWritesTheCpuRecordsAndLoadLandsTheirRoundTripInTheRightSlots) {
  const auto [codec, odd, align, order] = GetParam();
  const KvGeometry g = odd ? odd_geometry() : small_geometry();
  Tiers t = make_tiers(g, codec, 256, 1024, {}, align, order);
  std::mt19937 rng(7);
  std::vector<SlotId> l2_all = iota_slots(1024);
  std::shuffle(l2_all.begin(), l2_all.end(), rng);
  const std::vector<SlotId> l1_src = iota_slots(100, 3);
  const std::vector<SlotId> l2_dst(l2_all.begin(), l2_all.begin() + 100);
  std::vector<SlotId> l1_dst = iota_slots(100, 150);
  std::shuffle(l1_dst.begin(), l1_dst.end(), rng);
  const Rows written = fill(*t.l1, l1_src, 21, testing::RowKind::kOutliers);

  auto backup = t.engine->backup(l1_src, l2_dst);
  ASSERT_TRUE(backup.is_ok()) << backup.status().to_string();
  ASSERT_TRUE(t.engine->wait(*backup).is_ok());
  // Byte identity through the engine: every record in L2 is the CPU's.
  const int parts = g.rows_per_layer();
  for (int layer = 0; layer < g.num_layers; ++layer)
    for (int p = 0; p < parts; ++p) {
      const auto part = static_cast<KvPart>(p);
      const RecordLayout& layout = t.l2->layout(part);
      const auto expected = cpu_records(layout, written[static_cast<size_t>(layer * parts + p)]);
      for (size_t i = 0; i < l2_dst.size(); ++i)
        ASSERT_EQ(std::memcmp(t.l2->record(layer, part, l2_dst[i]), expected.data() + i * layout.record_bytes,
                              layout.record_bytes),
                  0)
            << "layer " << layer << " part " << p << " token " << i;
    }

  auto load = t.engine->load(l2_dst, l1_dst);
  ASSERT_TRUE(load.is_ok());
  for (int layer = 0; layer < g.num_layers; ++layer) ASSERT_TRUE(t.engine->wait_layer(*load, layer).is_ok());
  EXPECT_EQ(read(*t.l1, l1_dst), round_trip(*t.l2, written));
  const auto done = t.engine->poll();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].ticket, *backup);
  EXPECT_EQ(done[1].ticket, *load);
  const TransferStats s = t.engine->stats();
  EXPECT_EQ(s.backup_tokens, 100u);
  EXPECT_EQ(s.load_tokens, 100u);
  EXPECT_EQ(s.load_bytes, 100 * t.l2->bytes_per_token());
  EXPECT_GT(s.load_seconds, 0);
  EXPECT_EQ(s.codec.rows, 100u * static_cast<uint64_t>(g.num_layers * parts));
}

std::vector<EngineCase> engine_cases() {
  std::vector<EngineCase> out;
  for (CodecKind c : kAllCodecs) {
    out.push_back({c, false, 16});
    if (c != CodecKind::kInt4H) out.push_back({c, true, 1});  // int4h needs a power-of-two head_dim
  }
  out.push_back({CodecKind::kInt8, false, 128});
  // Keys and values in different codecs: one kernel launch per part.
  out.push_back({KvCodecs(CodecKind::kInt8, CodecKind::kInt4H), false, 16});
  out.push_back({KvCodecs(CodecKind::kBf16, CodecKind::kFp8), true, 1});
  // Token-major records (a token's bytes together), as a region shared by codecs needs.
  out.push_back({KvCodecs(CodecKind::kInt8, CodecKind::kInt4H), false, 16, RecordOrder::kTokenMajor});
  out.push_back({CodecKind::kInt4, true, 1, RecordOrder::kTokenMajor});
  return out;
}

std::string describe_engine_case(const ::testing::TestParamInfo<EngineCase>& p) {
  const KvCodecs c = p.param.codec;
  const std::string codec = c.split() ? "k_" + std::string(codec_name(c.k)) + "_v_" + std::string(codec_name(c.v))
                                      : std::string(codec_name(c.k));
  return codec + (p.param.odd_shape ? "_odd" : "") + "_align" + std::to_string(p.param.align) +
         (p.param.order == RecordOrder::kTokenMajor ? "_token_major" : "");
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, GpuEngineRoundTrip, ::testing::ValuesIn(engine_cases()), describe_engine_case);

TEST_F(GpuTest, NonFiniteHeadsAreCountedByTheEngine) {
  const KvGeometry g = small_geometry();
  Tiers t = make_tiers(g, CodecKind::kInt8, 16, 32);
  const std::vector<SlotId> slots = {0, 1};
  fill(*t.l1, slots, 1);
  std::vector<uint16_t> row(g.row_shape(KvPart::kK).elements(), 0x3F80);
  row[5] = 0x7FC0;  // NaN in head 0
  const SlotId one[] = {1};
  ASSERT_TRUE(t.l1->write_rows(2, KvPart::kK, one, row.data()).is_ok());
  auto b = t.engine->backup(slots, slots);
  ASSERT_TRUE(b.is_ok());
  ASSERT_TRUE(t.engine->wait(*b).is_ok());
  EXPECT_EQ(t.engine->stats().codec.nonfinite_heads, 1u);
}

TEST_F(GpuTest, ComputeStreamWaitsOnTheDeviceForExactlyTheLayerItReads) {
  const KvGeometry g = small_geometry();
  Tiers t = make_tiers(g, CodecKind::kInt8, 4096, 4096);
  const std::vector<SlotId> slots = iota_slots(4096);
  const Rows written = fill(*t.l1, slots, 5);
  auto b = t.engine->backup(slots, slots);
  ASSERT_TRUE(b.is_ok());
  ASSERT_TRUE(t.engine->wait(*b).is_ok());
  // Overwrite L1, then restore into it; a compute stream copies each layer's K
  // plane out as soon as (and only once) that layer is ready.
  fill(*t.l1, slots, 99);
  cudaStream_t compute = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), cudaSuccess);
  const size_t plane_bytes = slots.size() * g.row_shape(KvPart::kK).elements() * 2;
  void* out = nullptr;
  ASSERT_EQ(cudaMallocHost(&out, plane_bytes * static_cast<size_t>(g.num_layers)), cudaSuccess);
  auto load = t.engine->load(slots, slots);
  ASSERT_TRUE(load.is_ok());
  for (int layer = 0; layer < g.num_layers; ++layer) {
    ASSERT_TRUE(t.engine->stream_wait_layer(*load, layer, compute).is_ok());
    ASSERT_EQ(cudaMemcpyAsync(static_cast<std::byte*>(out) + static_cast<size_t>(layer) * plane_bytes,
                              t.l1->plane(layer, KvPart::kK), plane_bytes, cudaMemcpyDeviceToHost, compute),
              cudaSuccess);
  }
  ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);
  const Rows expected = round_trip(*t.l2, written);
  for (int layer = 0; layer < g.num_layers; ++layer)
    EXPECT_EQ(std::memcmp(static_cast<std::byte*>(out) + static_cast<size_t>(layer) * plane_bytes,
                          expected[static_cast<size_t>(layer * 2)].data(), plane_bytes),
              0)
        << "layer " << layer;
  EXPECT_EQ(t.engine->stream_wait_layer(*load, g.num_layers, compute).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(t.engine->stream_wait_layer(*load + 100, 0, compute).code(), StatusCode::kNotFound);
  (void)cudaFreeHost(out);
  (void)cudaStreamDestroy(compute);
}

TEST_F(GpuTest, BackupAndLoadInFlightAtOnce) {
  const KvGeometry g = small_geometry();
  Tiers t = make_tiers(g, CodecKind::kFp8, 8192, 16384);
  const std::vector<SlotId> a = iota_slots(4096), b = iota_slots(4096, 4096);
  const Rows first = fill(*t.l1, a, 1);
  auto seed = t.engine->backup(a, a);
  ASSERT_TRUE(seed.is_ok());
  ASSERT_TRUE(t.engine->wait(*seed).is_ok());
  const Rows second = fill(*t.l1, b, 2);
  // Load L2 0..4095 into L1 b while backing up L1 a into L2 8192..: disjoint slots, both streams busy.
  const std::vector<SlotId> l2_new = iota_slots(4096, 8192);
  auto backup = t.engine->backup(a, l2_new);
  auto load = t.engine->load(a, b);
  ASSERT_TRUE(backup.is_ok() && load.is_ok());
  ASSERT_TRUE(t.engine->wait(*load).is_ok());
  ASSERT_TRUE(t.engine->wait(*backup).is_ok());
  EXPECT_EQ(read(*t.l1, b), round_trip(*t.l2, first));
  // The new backup holds the same records as the first.
  for (int layer = 0; layer < g.num_layers; ++layer)
    EXPECT_EQ(std::memcmp(t.l2->record(layer, KvPart::kV, 8192), t.l2->record(layer, KvPart::kV, 0),
                          4096 * t.l2->layout(KvPart::kV).record_bytes),
              0);
  (void)second;
}

TEST_F(GpuTest, ManySmallTransfersInterleavedWithLayerWaitsStayInOrderAndCorrect) {
  const KvGeometry g = small_geometry();
  TransferEngineOptions o;
  o.max_inflight = 32;
  Tiers t = make_tiers(g, CodecKind::kInt4H, 2048, 4096, o);
  std::mt19937 rng(11);
  const std::vector<SlotId> src = iota_slots(1024);
  const Rows written = fill(*t.l1, src, 3);
  auto seed = t.engine->backup(src, src);
  ASSERT_TRUE(seed.is_ok());
  ASSERT_TRUE(t.engine->wait(*seed).is_ok());
  (void)t.engine->poll();
  const Rows expected = round_trip(*t.l2, written);

  // 400 operations of 1–17 tokens: loads of L2 slots first.. into L1
  // 1024 + first.., backups of L1 first.. into L2 2048 + first..; waits on
  // random layers; polls. Afterwards every L1 slot a load covered holds the
  // round trip of its source, every other one its earlier contents, and every
  // L2 slot a backup covered the seed backup's records.
  const std::vector<SlotId> targets = iota_slots(1024, 1024);
  const Rows initial = fill(*t.l1, targets, 77);
  std::vector<bool> loaded(1024, false), backed_up(1024, false);
  std::vector<Ticket> issued;
  size_t acknowledged = 0;
  for (int i = 0; i < 400; ++i) {
    const size_t n = 1 + rng() % 17, first = rng() % (1024 - n);
    const bool backup = i % 3 == 2;
    const auto base = static_cast<SlotId>(first);
    Result<Ticket> ticket = backup ? t.engine->backup(iota_slots(n, base), iota_slots(n, 2048 + base))
                                   : t.engine->load(iota_slots(n, base), iota_slots(n, 1024 + base));
    if (!ticket) {  // the bound on operations: acknowledge some, then retry
      ASSERT_EQ(ticket.status().code(), StatusCode::kResourceExhausted);
      t.engine->drain();
      for (const Completion& c : t.engine->poll()) {
        ASSERT_TRUE(c.status.is_ok());
        ASSERT_EQ(c.ticket, issued[acknowledged]);
        ++acknowledged;
      }
      --i;
      continue;
    }
    for (size_t k = first; k < first + n; ++k) (backup ? backed_up : loaded)[k] = true;
    issued.push_back(*ticket);
    if (rng() % 4 == 0) {
      ASSERT_TRUE(t.engine->wait_layer(*ticket, static_cast<int>(rng() % 4)).is_ok());
    }
    for (const Completion& c : t.engine->poll()) {
      ASSERT_TRUE(c.status.is_ok());
      ASSERT_EQ(c.ticket, issued[acknowledged]) << "completions out of order";
      ++acknowledged;
    }
  }
  t.engine->drain();
  for (const Completion& c : t.engine->poll()) {
    ASSERT_EQ(c.ticket, issued[acknowledged]);
    ++acknowledged;
  }
  EXPECT_EQ(acknowledged, issued.size());
  EXPECT_EQ(read(*t.l1, src), written);  // sources untouched
  const Rows after = read(*t.l1, targets);
  const size_t row = g.row_shape(KvPart::kK).elements();
  for (size_t r = 0; r < after.size(); ++r)
    for (size_t s = 0; s < 1024; ++s) {
      const Rows& want = loaded[s] ? expected : initial;
      ASSERT_EQ(std::memcmp(after[r].data() + s * row, want[r].data() + s * row, row * 2), 0)
          << "row index " << r << ", L1 slot " << 1024 + s << (loaded[s] ? " (loaded)" : " (untouched)");
    }
  for (int layer = 0; layer < g.num_layers; ++layer)
    for (size_t s = 0; s < 1024; ++s) {
      if (!backed_up[s]) continue;
      ASSERT_EQ(std::memcmp(t.l2->record(layer, KvPart::kK, static_cast<SlotId>(2048 + s)),
                              t.l2->record(layer, KvPart::kK, static_cast<SlotId>(s)),
                              t.l2->layout(KvPart::kK).record_bytes),
                  0);
    }
}

TEST_F(GpuTest, SlotListStagingGrowsWhileTransfersAreQueued) {
  const KvGeometry g = small_geometry();
  Tiers t = make_tiers(g, CodecKind::kInt8, 65536, 65536);
  const std::vector<SlotId> all = iota_slots(65536);
  const Rows written = fill(*t.l1, all, 8);
  auto seed = t.engine->backup(all, all);
  ASSERT_TRUE(seed.is_ok());
  ASSERT_TRUE(t.engine->wait(*seed).is_ok());
  const Rows expected = round_trip(*t.l2, written);
  // Queue small loads behind a big one, then one whose slot list is larger
  // than the staging ring: the ring grows while the small loads' lists, in
  // the old buffer, are still to be read.
  std::vector<Ticket> tickets;
  for (int i = 0; i < 20; ++i) {
    auto ticket = t.engine->load(iota_slots(100, static_cast<SlotId>(i * 100)), iota_slots(100, static_cast<SlotId>(i * 100)));
    ASSERT_TRUE(ticket.is_ok());
    tickets.push_back(*ticket);
  }
  auto big = t.engine->load(all, all);
  ASSERT_TRUE(big.is_ok());
  for (int i = 0; i < 20; ++i) {
    auto ticket = t.engine->load(iota_slots(50, static_cast<SlotId>(60000 + i * 50)),
                                 iota_slots(50, static_cast<SlotId>(60000 + i * 50)));
    ASSERT_TRUE(ticket.is_ok());
  }
  t.engine->drain();
  for (const Completion& c : t.engine->poll()) ASSERT_TRUE(c.status.is_ok());
  EXPECT_EQ(read(*t.l1, all), expected);
}

TEST_F(GpuTest, InjectedFailureFailsTheLoadFromThatLayerAndIsCounted) {
  const KvGeometry g = small_geometry();
  TransferEngineOptions o;
  o.before_layer = [](Ticket, TransferKind kind, int layer) {
    return kind == TransferKind::kLoad && layer == 2 ? unavailable("injected") : Status::ok();
  };
  Tiers t = make_tiers(g, CodecKind::kInt8, 64, 64, o);
  const std::vector<SlotId> slots = iota_slots(8);
  fill(*t.l1, slots, 1);
  auto b = t.engine->backup(slots, slots);
  ASSERT_TRUE(b.is_ok());
  auto load = t.engine->load(slots, iota_slots(8, 32));
  ASSERT_TRUE(load.is_ok());
  EXPECT_EQ(t.engine->wait_layer(*load, 3).code(), StatusCode::kUnavailable);
  EXPECT_FALSE(*t.engine->layer_ready(*load, 3));
  EXPECT_EQ(t.engine->wait(*load).code(), StatusCode::kUnavailable);
  const auto done = t.engine->poll();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_TRUE(done[0].status.is_ok());
  EXPECT_FALSE(done[1].status.is_ok());
  EXPECT_EQ(t.engine->stats().failed_ops, 1u);
  EXPECT_EQ(t.engine->wait(*load).code(), StatusCode::kNotFound);  // acknowledged: forgotten
}

TEST_F(GpuTest, RefusesAnL1PoolInHostMemoryAndMismatchedPools) {
  const KvGeometry g = small_geometry();
  auto host_l1 = make_host_memory_device_pool(g, 16);
  ASSERT_TRUE(host_l1.is_ok());
  HostKvPoolOptions o;
  auto l2 = HostKvPool::create(g, o, 16);
  ASSERT_TRUE(l2.is_ok());
  EXPECT_EQ(make_cuda_transfer_engine(**host_l1, **l2).status().code(), StatusCode::kInvalidArgument);
  auto other_l1 = make_cuda_device_kv_pool(odd_geometry(), 16);
  ASSERT_TRUE(other_l1.is_ok());
  EXPECT_EQ(make_cuda_transfer_engine(**other_l1, **l2).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace hiq
