// The CPU transfer engine: round trips through every codec land exactly the
// codec's round trip of the original KV in the right L1 slots; a consumer can
// wait for one layer; completions come back in order, once; the bound on
// operations holds; an injected failure fails the operation and is counted;
// backups and loads run concurrently (also under TSan).
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "codec_test_data.h"
#include "kv/model_config.h"
#include "transfer/transfer_engine.h"

namespace hiq {
namespace {

KvGeometry small_geometry() {
  // 4 layers × 2 KV heads × 64: small enough to check every element.
  return *geometry_from_config_json(
      R"({"model_type": "qwen3", "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 64})",
      "small");
}

struct Tiers {
  std::unique_ptr<DeviceKvPool> l1;
  std::unique_ptr<HostKvPool> l2;
};

Tiers make_tiers(CodecKind codec, size_t l1_slots = 64, double ratio = 2) {
  const KvGeometry g = small_geometry();
  HostKvPoolOptions o;
  o.codec = codec;
  o.ratio = ratio;
  Tiers t{*make_host_memory_device_pool(g, l1_slots), *HostKvPool::create(g, o, l1_slots)};
  return t;
}

// Fills the given L1 slots with Gaussian KV; returns the rows written, per (layer, part), slot by slot.
std::vector<std::vector<uint16_t>> fill(DeviceKvPool& l1, std::span<const SlotId> slots, uint32_t seed) {
  std::vector<std::vector<uint16_t>> written;
  const KvGeometry& g = l1.geometry();
  for (int layer = 0; layer < g.num_layers; ++layer)
    for (KvPart part : {KvPart::kK, KvPart::kV}) {
      const RowShape shape = g.row_shape(part);
      auto rows = testing::make_rows(testing::RowKind::kGaussian, shape, slots.size(), seed++);
      for (size_t i = 0; i < slots.size(); ++i)
        std::memcpy(l1.row(layer, part, slots[i]), rows.data() + i * shape.elements(), shape.elements() * 2);
      written.push_back(std::move(rows));
    }
  return written;
}

// What decoding the encoded rows gives: the exact expectation after a round trip.
std::vector<uint16_t> codec_round_trip(const RecordLayout& layout, const std::vector<uint16_t>& rows) {
  const size_t n = rows.size() / layout.shape.elements();
  std::vector<std::byte> records(n * layout.record_bytes);
  std::vector<uint16_t> out(rows.size());
  encode_rows(layout, rows.data(), layout.shape.elements(), n, records.data());
  decode_rows(layout, records.data(), n, out.data(), layout.shape.elements());
  return out;
}

class TransferRoundTrip : public ::testing::TestWithParam<CodecKind> {};

TEST_P(TransferRoundTrip, LoadBringsBackTheCodecsRoundTripInTheRightSlots) {
  Tiers t = make_tiers(GetParam());
  auto engine = make_cpu_transfer_engine(*t.l1, *t.l2);
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  const std::vector<SlotId> l1_src = {3, 9, 10, 11, 40}, l2_dst = {100, 7, 8, 0, 55}, l1_dst = {60, 1, 2, 33, 12};
  const auto written = fill(*t.l1, l1_src, 5);

  auto backup = (*engine)->backup(l1_src, l2_dst);
  ASSERT_TRUE(backup.is_ok());
  ASSERT_TRUE((*engine)->wait(*backup).is_ok());
  auto load = (*engine)->load(l2_dst, l1_dst);
  ASSERT_TRUE(load.is_ok());
  ASSERT_TRUE((*engine)->wait(*load).is_ok());

  const KvGeometry& g = t.l1->geometry();
  size_t plane = 0;
  for (int layer = 0; layer < g.num_layers; ++layer)
    for (KvPart part : {KvPart::kK, KvPart::kV}) {
      const auto expected = codec_round_trip(t.l2->layout(part), written[plane++]);
      const size_t n = t.l1->row_elements(part);
      for (size_t i = 0; i < l1_dst.size(); ++i)
        ASSERT_EQ(0, std::memcmp(t.l1->row(layer, part, l1_dst[i]), expected.data() + i * n, n * 2))
            << "layer " << layer << " part " << static_cast<int>(part) << " slot " << l1_dst[i];
    }

  const auto done = (*engine)->poll();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].ticket, *backup);
  EXPECT_EQ(done[1].ticket, *load);
  EXPECT_EQ(done[0].tokens, 5u);
  const TransferStats s = (*engine)->stats();
  EXPECT_EQ(s.backup_tokens, 5u);
  EXPECT_EQ(s.load_tokens, 5u);
  EXPECT_EQ(s.backup_bytes, 5 * t.l2->bytes_per_token());
  EXPECT_EQ(s.codec.rows, 5u * g.num_layers * 2);
  EXPECT_EQ(s.failed_ops, 0u);
  EXPECT_EQ((*engine)->wait(*backup).code(), StatusCode::kNotFound);  // acknowledged: forgotten
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, TransferRoundTrip, ::testing::ValuesIn(kAllCodecs),
                         [](const auto& p) { return std::string(codec_name(p.param)); });

// Holds operations at a chosen layer until released: lets tests see partial progress.
class LayerGate {
 public:
  Status before_layer(Ticket ticket, int layer) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return ticket != held_ticket_ || layer < open_below_; });
    return Status::ok();
  }
  void hold(Ticket ticket, int open_below) {
    std::lock_guard lock(mu_);
    held_ticket_ = ticket;
    open_below_ = open_below;
  }
  void open_below(int layers) {
    {
      std::lock_guard lock(mu_);
      open_below_ = layers;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  Ticket held_ticket_ = 0;
  int open_below_ = 0;
};

TEST(TransferEngine, ConsumerWaitsForOneLayerWhileLaterLayersAreHeld) {
  Tiers t = make_tiers(CodecKind::kInt8);
  LayerGate gate;
  gate.hold(1, 2);  // ticket 1 (the first operation): layers 0 and 1 may run, 2 and 3 wait
  TransferEngineOptions o;
  o.before_layer = [&](Ticket ticket, TransferKind, int layer) { return gate.before_layer(ticket, layer); };
  auto engine = make_cpu_transfer_engine(*t.l1, *t.l2, o);
  ASSERT_TRUE(engine.is_ok());
  const std::vector<SlotId> l2 = {1, 2, 3}, l1 = {4, 5, 6};
  auto load = (*engine)->load(l2, l1);
  ASSERT_TRUE(load.is_ok());
  ASSERT_EQ(*load, 1u);
  EXPECT_TRUE((*engine)->wait_layer(*load, 0).is_ok());
  EXPECT_TRUE((*engine)->wait_layer(*load, 1).is_ok());
  EXPECT_FALSE(*(*engine)->layer_ready(*load, 2));
  EXPECT_FALSE(*(*engine)->layer_ready(*load, 3));
  EXPECT_TRUE((*engine)->poll().empty());
  gate.open_below(4);
  EXPECT_TRUE((*engine)->wait_layer(*load, 3).is_ok());
  EXPECT_TRUE((*engine)->wait(*load).is_ok());
  EXPECT_EQ((*engine)->poll().size(), 1u);
}

TEST(TransferEngine, CompletionsAreAcknowledgedInSubmissionOrder) {
  Tiers t = make_tiers(CodecKind::kBf16);
  // Layer 0 of the first operation waits for a release; the other worker
  // runs its remaining layers and all of the second operation.
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  TransferEngineOptions o;
  o.workers = 2;
  o.before_layer = [&](Ticket ticket, TransferKind, int layer) {
    if (ticket == 1 && layer == 0) {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return released; });
    }
    return Status::ok();
  };
  auto engine = make_cpu_transfer_engine(*t.l1, *t.l2, o);
  ASSERT_TRUE(engine.is_ok());
  const std::vector<SlotId> a = {1}, b = {2};
  auto first = (*engine)->backup(a, a);
  auto second = (*engine)->backup(b, b);
  ASSERT_TRUE(first.is_ok() && second.is_ok());
  ASSERT_EQ(*first, 1u);
  ASSERT_TRUE((*engine)->wait(*second).is_ok());
  EXPECT_FALSE(*(*engine)->layer_ready(*first, 0));
  EXPECT_TRUE((*engine)->poll().empty()) << "the second completion must wait for the first";
  {
    std::lock_guard lock(mu);
    released = true;
  }
  cv.notify_all();
  (*engine)->drain();
  const auto done = (*engine)->poll();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].ticket, *first);
  EXPECT_EQ(done[1].ticket, *second);
  EXPECT_TRUE((*engine)->poll().empty()) << "each completion is returned once";
}

TEST(TransferEngine, RefusesBeyondItsBoundAndBadArguments) {
  Tiers t = make_tiers(CodecKind::kInt8);
  TransferEngineOptions o;
  o.max_inflight = 2;
  auto engine = make_cpu_transfer_engine(*t.l1, *t.l2, o);
  ASSERT_TRUE(engine.is_ok());
  // Operations in flight at once must not share destination slots (the cache's contract).
  const std::vector<SlotId> s = {1}, s2 = {2}, s3 = {3};
  ASSERT_TRUE((*engine)->backup(s, s).is_ok());
  ASSERT_TRUE((*engine)->backup(s2, s2).is_ok());
  auto third = (*engine)->backup(s3, s3);
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  (*engine)->drain();
  EXPECT_EQ((*engine)->backup(s3, s3).status().code(), StatusCode::kResourceExhausted) << "unacknowledged count too";
  EXPECT_EQ((*engine)->poll().size(), 2u);
  EXPECT_TRUE((*engine)->backup(s3, s3).is_ok());
  EXPECT_EQ((*engine)->stats().refused_ops, 2u);

  const std::vector<SlotId> two = {1, 2}, far = {100000};
  EXPECT_EQ((*engine)->backup(two, s).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*engine)->backup(far, s).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ((*engine)->load(s, far).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ((*engine)->wait(987654).code(), StatusCode::kNotFound);
}

TEST(TransferEngine, InjectedFailureFailsTheOperationAndIsCounted) {
  Tiers t = make_tiers(CodecKind::kInt4);
  TransferEngineOptions o;
  o.workers = 1;
  o.before_layer = [](Ticket ticket, TransferKind kind, int layer) {
    if (ticket == 2 && kind == TransferKind::kLoad && layer == 2) return data_loss("injected: L2 record unreadable");
    return Status::ok();
  };
  auto engine = make_cpu_transfer_engine(*t.l1, *t.l2, o);
  ASSERT_TRUE(engine.is_ok());
  const std::vector<SlotId> s = {1, 2};
  auto backup = (*engine)->backup(s, s);
  auto load = (*engine)->load(s, s);
  ASSERT_TRUE(backup.is_ok() && load.is_ok());
  EXPECT_TRUE((*engine)->wait(*backup).is_ok());
  const Status failed = (*engine)->wait(*load);
  EXPECT_EQ(failed.code(), StatusCode::kDataLoss);
  EXPECT_EQ((*engine)->wait_layer(*load, 3).code(), StatusCode::kDataLoss);
  EXPECT_FALSE(*(*engine)->layer_ready(*load, 3));
  const auto done = (*engine)->poll();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_TRUE(done[0].status.is_ok());
  EXPECT_EQ(done[1].status.code(), StatusCode::kDataLoss);
  EXPECT_EQ((*engine)->stats().failed_ops, 1u);
  EXPECT_EQ((*engine)->stats().load_ops, 0u);
}

// Many small backups and loads at once, each waited on layer by layer; every
// restored slot must hold its own round trip. Meant for TSan as much as for
// the values.
TEST(TransferEngine, ConcurrentBackupsAndLoadsEachLandTheirOwnKv) {
  Tiers t = make_tiers(CodecKind::kInt8, /*l1_slots=*/256, /*ratio=*/1);
  TransferEngineOptions o;
  o.workers = 3;
  o.max_inflight = 16;
  auto engine = make_cpu_transfer_engine(*t.l1, *t.l2, o);
  ASSERT_TRUE(engine.is_ok());
  TransferEngine& e = **engine;
  const KvGeometry& g = t.l1->geometry();
  // Slots 0..127 are sources (backed up to the same L2 slot); 128..255 receive loads.
  std::vector<SlotId> sources(128);
  for (SlotId i = 0; i < 128; ++i) sources[i] = i;
  const auto written = fill(*t.l1, sources, 11);
  std::vector<Ticket> backups;
  for (SlotId first = 0; first < 128; first += 8) {
    std::vector<SlotId> chunk(sources.begin() + first, sources.begin() + first + 8);
    auto ticket = e.backup(chunk, chunk);
    while (!ticket.is_ok()) {  // bounded: acknowledge and retry
      ASSERT_EQ(ticket.status().code(), StatusCode::kResourceExhausted);
      ASSERT_TRUE(e.wait(backups.back()).is_ok());
      e.poll();
      ticket = e.backup(chunk, chunk);
    }
    backups.push_back(*ticket);
  }
  e.drain();
  for (const auto& c : e.poll()) ASSERT_TRUE(c.status.is_ok());

  std::atomic<int> failures{0};
  std::vector<std::thread> consumers;
  for (int c = 0; c < 4; ++c) {
    consumers.emplace_back([&, c] {
      for (SlotId first = static_cast<SlotId>(c) * 32; first < static_cast<SlotId>(c + 1) * 32; first += 8) {
        std::vector<SlotId> from(8), to(8);
        for (SlotId i = 0; i < 8; ++i) from[i] = first + i, to[i] = 128 + first + i;
        Result<Ticket> ticket = e.load(from, to);
        while (!ticket.is_ok()) {
          std::this_thread::yield();
          e.poll();
          ticket = e.load(from, to);
        }
        for (int layer = 0; layer < g.num_layers; ++layer)
          if (!e.wait_layer(*ticket, layer).is_ok()) ++failures;
      }
    });
  }
  for (auto& th : consumers) th.join();
  e.drain();
  e.poll();
  EXPECT_EQ(failures.load(), 0);

  size_t plane = 0;
  for (int layer = 0; layer < g.num_layers; ++layer)
    for (KvPart part : {KvPart::kK, KvPart::kV}) {
      const auto expected = codec_round_trip(t.l2->layout(part), written[plane++]);
      const size_t n = t.l1->row_elements(part);
      for (SlotId i = 0; i < 128; ++i)
        ASSERT_EQ(0, std::memcmp(t.l1->row(layer, part, 128 + i), expected.data() + i * n, n * 2))
            << "layer " << layer << " slot " << 128 + i;
    }
  EXPECT_EQ(e.stats().load_tokens, 128u);
  EXPECT_EQ(e.stats().backup_tokens, 128u);
}

TEST(TransferEngine, RejectsPoolsThatDoNotMatch) {
  Tiers a = make_tiers(CodecKind::kInt8);
  HostKvPoolOptions o;
  o.ratio = 1;
  auto other = HostKvPool::create(*resolve_model_geometry("qwen3-0.6b"), o, 8);
  ASSERT_TRUE(other.is_ok());
  auto engine = make_cpu_transfer_engine(*a.l1, **other);
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
  TransferEngineOptions none;
  none.workers = 0;
  EXPECT_EQ(make_cpu_transfer_engine(*a.l1, *a.l2, none).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace hiq
