// Serving under tensor parallelism on the CPU (--tp-size): CpuTpModel behind
// the scheduler and the serving engine, each rank with its own L1 pool and
// its own records in the one host pool (memory/host_kv_pool.h), one radix
// tree for all ranks. Served greedy tokens are exactly the TP pass's own
// (computed directly, from scratch), and within rounding of the one-rank
// model; a prefix restored from L2 gives the logits of recomputing it (BF16:
// bit for bit; INT8: the codec's round trip of every rank's rows); a layer of
// a restore is ready only once every rank's part is, and a rank that fails
// fails the operation (recomputed) or the request (the engine goes on); the
// configuration refuses tensor-parallel sizes it cannot serve.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cache/radix_cache.h"
#include "codec/codec.h"
#include "engine/cpu_model_runner.h"
#include "engine/serving_engine.h"
#include "expect_error.h"
#include "kv/model_config.h"
#include "memory/host_kv_pool.h"
#include "model/loaded_model.h"
#include "model/tensor_parallel.h"
#include "relative_error.h"
#include "server/serving_stack.h"
#include "tensor_parallel_test_util.h"
#include "tiny_model.h"
#include "transfer/transfer_engine.h"

namespace hiq {
namespace {

using namespace std::chrono_literals;
using testing::expect_error;
using testing::TinyModel;

using testing::rank_geometry;
using testing::rank_pools;
using testing::RankPools;

std::vector<SlotId> slot_range(SlotId first, size_t n) {
  std::vector<SlotId> s(n);
  for (size_t i = 0; i < n; ++i) s[i] = first + static_cast<SlotId>(i);
  return s;
}

// Greedy generation through the TP pass alone, on fresh pools, one token per
// step: what the ranks generate from scratch (empty if a pass fails).
std::vector<TokenId> generate_alone_tp(const CpuTpModel& model, const std::vector<TokenId>& prompt, int new_tokens) {
  RankPools p = rank_pools(model.shape(), model.size(), prompt.size() + static_cast<size_t>(new_tokens));
  const std::vector<SlotId> slots = slot_range(0, prompt.size() + static_cast<size_t>(new_tokens));
  std::vector<TokenId> tokens = prompt, out;
  size_t first_new = 0;
  for (int i = 0; i < new_tokens; ++i) {
    auto logits = model.forward(p.pools, tokens, std::span(slots).first(tokens.size()), first_new);
    if (!logits) return {};
    out.push_back(static_cast<TokenId>(std::max_element(logits->begin(), logits->end()) - logits->begin()));
    first_new = tokens.size();
    tokens.push_back(out.back());
  }
  return out;
}

using testing::relative_error;

// A rank's L1 pool whose writes fail while `failing` is set (a failed device
// copy on that rank); reads and the planes the transfer engine uses are the
// inner pool's.
class FailingPool : public DeviceKvPool {
 public:
  explicit FailingPool(DeviceKvPool& inner) : DeviceKvPool(inner.geometry(), inner.num_slots()), inner_(inner) {}
  uint16_t* plane(int layer, KvPart part) override { return inner_.plane(layer, part); }
  bool host_accessible() const override { return true; }
  Status read_rows(int layer, KvPart part, std::span<const SlotId> slots, uint16_t* out) override {
    return inner_.read_rows(layer, part, slots, out);
  }
  Status write_rows(int layer, KvPart part, std::span<const SlotId> slots, const uint16_t* rows) override {
    if (failing.load()) return data_loss("injected: rank's copy of layer " + std::to_string(layer) + " failed");
    return inner_.write_rows(layer, part, slots, rows);
  }
  std::atomic<bool> failing{false};

 private:
  DeviceKvPool& inner_;
};

// Everything a TP serving engine runs on, built in dependency order and torn
// down in reverse (the engine thread first).
struct TpServing {
  TpServing(const TinyModel& m, int size, CodecKind codec, size_t l1_slots, TransferEngineOptions options = {}) {
    auto created = CpuTpModel::create(m.shape, m.weights, size);
    EXPECT_TRUE(created.is_ok()) << created.status().to_string();
    model = std::move(*created);
    l1 = rank_pools(m.shape, size, l1_slots);
    // Rank 1 writes through a pool that can fail (off unless a test sets it).
    failing = std::make_unique<FailingPool>(*l1.pools[1]);
    l1.pools[1] = failing.get();
    HostKvPoolOptions ho;
    ho.codec = codec;
    ho.ratio = 4;
    auto host = HostKvPool::create(tp_host_geometry(rank_geometry(m.shape, size)), ho, l1_slots);
    EXPECT_TRUE(host.is_ok()) << host.status().to_string();
    l2 = std::move(*host);
    auto engine_or = make_cpu_transfer_engine(l1.pools, *l2, std::move(options));
    EXPECT_TRUE(engine_or.is_ok()) << engine_or.status().to_string();
    transfer = std::move(*engine_or);
    runner = std::make_unique<CpuModelRunner>(*model, l1.pools, transfer.get());
    cache = std::make_unique<RadixCache>(*l1.pools[0], l2.get(), transfer.get());
    engine =
        std::make_unique<ServingEngine>(*cache, *l1.pools[0], transfer.get(), *runner, SchedulerOptions{}, l2.get());
  }
  ~TpServing() {
    engine.reset();
    cache.reset();
  }
  // Submits one request and reads it to its end.
  RequestResult run(std::vector<TokenId> prompt, int max_new_tokens) {
    Request r;
    r.prompt = std::move(prompt);
    r.max_new_tokens = max_new_tokens;
    auto stream = engine->submit(std::move(r));
    EXPECT_TRUE(stream.is_ok()) << stream.status().to_string();
    if (!stream.is_ok()) return {};
    while (auto event = (*stream)->next(60s))
      if (event->kind == GenerationEvent::Kind::kFinished) return std::move(event->result);
    ADD_FAILURE() << "no result within 60 s";
    return {};
  }

  std::unique_ptr<CpuTpModel> model;
  RankPools l1;
  std::unique_ptr<FailingPool> failing;
  std::unique_ptr<HostKvPool> l2;
  std::unique_ptr<TransferEngine> transfer;
  std::unique_ptr<CpuModelRunner> runner;
  std::unique_ptr<RadixCache> cache;
  std::unique_ptr<ServingEngine> engine;
};

// 6 groups × 3 prompts: a shared prefix of 40 tokens and a question of 6,
// different in each pass. Groups in order, then again: with a 160-slot L1 the
// second pass finds the prefixes evicted and restores them from L2.
std::vector<std::vector<TokenId>> prompts(int pass) {
  std::vector<std::vector<TokenId>> out;
  for (int g = 0; g < 6; ++g)
    for (int p = 0; p < 3; ++p) {
      std::vector<TokenId> prompt;
      for (int i = 0; i < 40; ++i) prompt.push_back(static_cast<TokenId>((g * 31 + i * 7) % 97));
      for (int i = 0; i < 6; ++i) prompt.push_back(static_cast<TokenId>((p * 13 + i * 5 + pass * 29 + 50) % 97));
      out.push_back(std::move(prompt));
    }
  return out;
}

constexpr int kNewTokens = 4;

class TensorParallelServing : public ::testing::TestWithParam<int> {};

// TP-2 splits the tiny model's 2 KV heads; TP-4 replicates each on two ranks.
INSTANTIATE_TEST_SUITE_P(Sizes, TensorParallelServing, ::testing::Values(2, 4),
                         [](const auto& p) { return "tp" + std::to_string(p.param); });

TEST_P(TensorParallelServing, SharedPrefixesGetExactlyTheTokensOfTheDirectPassAndRestoreFromL2) {
  const TinyModel m;
  TpServing s(m, GetParam(), CodecKind::kBf16, 160);
  size_t restored = 0, reused = 0, requests = 0;
  for (int pass = 0; pass < 2; ++pass)
    for (const std::vector<TokenId>& prompt : prompts(pass)) {
      const RequestResult r = s.run(prompt, kNewTokens);
      ASSERT_TRUE(r.status.is_ok()) << r.status.to_string();
      EXPECT_EQ(r.output, generate_alone_tp(*s.model, prompt, kNewTokens))
          << "pass " << pass << ", request " << requests;
      restored += r.cached_l2_tokens;
      reused += r.cached_l1_tokens;
      ++requests;
    }
  EXPECT_GT(reused, 0u) << "prompts of a group share their prefix in L1";
  EXPECT_GT(restored, 0u) << "the second pass must restore prefixes from L2";
  // A third pass all at once: batches of several requests, restores among them.
  std::vector<std::shared_ptr<GenerationStream>> streams;
  for (const std::vector<TokenId>& prompt : prompts(2)) {
    Request r;
    r.prompt = prompt;
    r.max_new_tokens = kNewTokens;
    auto stream = s.engine->submit(std::move(r));
    ASSERT_TRUE(stream.is_ok()) << stream.status().to_string();
    streams.push_back(std::move(*stream));
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    RequestResult r;
    while (auto event = streams[i]->next(60s))
      if (event->kind == GenerationEvent::Kind::kFinished) {
        r = std::move(event->result);
        break;
      }
    ASSERT_TRUE(r.status.is_ok()) << r.status.to_string();
    EXPECT_EQ(r.output, generate_alone_tp(*s.model, prompts(2)[i], kNewTokens)) << "concurrent request " << i;
  }
  // The cache is the engine thread's: its counters come through the engine.
  EXPECT_EQ(s.engine->stats().cache.load_back_failures, 0u);
  EXPECT_GT(s.transfer->stats().load_tokens, 0u);
  // Every rank's records moved: the bytes are all ranks' records per token.
  EXPECT_EQ(s.transfer->stats().load_bytes, s.transfer->stats().load_tokens * s.l2->bytes_per_token());
  // Nothing leaked: the tree owns what is not free.
  ASSERT_TRUE(s.engine->flush_cache().is_ok());
  EXPECT_EQ(s.engine->stats().l1_free_slots, s.l1.pools[0]->num_slots());
  EXPECT_EQ(s.l2->used_tokens(), 0u);
}

TEST_P(TensorParallelServing, ServedSequencesStayWithinRoundingOfTheOneRankModel) {
  const TinyModel m;
  TpServing s(m, GetParam(), CodecKind::kBf16, 160);
  for (const std::vector<TokenId>& prompt : prompts(0)) {
    const RequestResult r = s.run(prompt, kNewTokens);
    ASSERT_TRUE(r.status.is_ok()) << r.status.to_string();
    // The logits of the whole served sequence, one rank against the ranks:
    // the 2 % tensor_parallel_test.cc holds the TP pass to (its partial sums'
    // extra BF16 rounding), so a served token is the model's up to near-ties.
    std::vector<TokenId> sequence = prompt;
    sequence.insert(sequence.end(), r.output.begin(), r.output.end() - 1);
    const std::vector<SlotId> slots = slot_range(0, sequence.size());
    auto one_pool = m.pool(sequence.size());
    auto one = cpu_forward(m.shape, m.weights, *one_pool, sequence, slots, 0, /*all_logits=*/true);
    ASSERT_TRUE(one.is_ok()) << one.status().to_string();
    RankPools p = rank_pools(m.shape, GetParam(), sequence.size());
    auto split = s.model->forward(p.pools, sequence, slots, 0, /*all_logits=*/true);
    ASSERT_TRUE(split.is_ok()) << split.status().to_string();
    EXPECT_LT(relative_error(*split, *one), 2e-2);
    // And the served tokens are the argmax of those TP logits.
    const auto vocab = static_cast<size_t>(m.shape.vocab_size);
    for (size_t i = 0; i < r.output.size(); ++i) {
      const auto row = split->begin() + static_cast<ptrdiff_t>((prompt.size() - 1 + i) * vocab);
      EXPECT_EQ(r.output[i], std::max_element(row, row + static_cast<ptrdiff_t>(vocab)) - row) << "token " << i;
    }
  }
}

TEST(TensorParallelServingFailures, ARankThatFailsFailsItsRequestAndTheEngineGoesOn) {
  const TinyModel m;
  TpServing s(m, 2, CodecKind::kBf16, 160);
  const std::vector<TokenId> prompt = prompts(0)[0];
  s.failing->failing = true;
  const RequestResult failed = s.run(prompt, kNewTokens);
  EXPECT_EQ(failed.finish_reason, FinishReason::kError);
  ASSERT_FALSE(failed.status.is_ok());
  EXPECT_NE(failed.status.message().find("injected"), std::string::npos) << failed.status.to_string();
  s.failing->failing = false;
  // The same prompt again: nothing of the failed pass is served.
  const RequestResult ok = s.run(prompt, kNewTokens);
  ASSERT_TRUE(ok.status.is_ok()) << ok.status.to_string();
  EXPECT_EQ(ok.output, generate_alone_tp(*s.model, prompt, kNewTokens));
  EXPECT_EQ(ok.cached_l1_tokens + ok.cached_l2_tokens, 0u) << "the failed request cached nothing";
  ASSERT_TRUE(s.engine->flush_cache().is_ok());
  EXPECT_EQ(s.engine->stats().l1_free_slots, s.l1.pools[0]->num_slots());
}

TEST(TensorParallelServingFailures, ARestoreThatFailsOnOneRankIsRecomputed) {
  const TinyModel m;
  std::atomic<bool> fail_rank1_loads{false};
  TransferEngineOptions options;
  options.before_rank_layer = [&](Ticket, TransferKind kind, int rank, int layer) {
    if (kind == TransferKind::kLoad && rank == 1 && layer == 1 && fail_rank1_loads.load())
      return data_loss("injected: rank 1's restore of layer 1 failed");
    return Status::ok();
  };
  TpServing s(m, 2, CodecKind::kBf16, 160, options);
  for (const std::vector<TokenId>& prompt : prompts(0)) ASSERT_TRUE(s.run(prompt, kNewTokens).status.is_ok());
  fail_rank1_loads = true;
  size_t restored = 0;
  for (const std::vector<TokenId>& prompt : prompts(1)) {
    const RequestResult r = s.run(prompt, kNewTokens);
    ASSERT_TRUE(r.status.is_ok()) << r.status.to_string();
    EXPECT_EQ(r.output, generate_alone_tp(*s.model, prompt, kNewTokens));
    restored += r.cached_l2_tokens;
  }
  EXPECT_EQ(restored, 0u) << "no restore can succeed with rank 1 failing";
  EXPECT_GT(s.engine->stats().cache.load_back_failures, 0u) << "the second pass must have tried to restore";
  EXPECT_EQ(s.transfer->stats().load_ops, 0u);
  EXPECT_GT(s.transfer->stats().failed_ops, 0u);
  ASSERT_TRUE(s.engine->flush_cache().is_ok());
  EXPECT_EQ(s.engine->stats().l1_free_slots, s.l1.pools[0]->num_slots());
}

// A prefix computed by the ranks, backed up, restored into other slots of
// fresh pools, then continued: against computing the whole sequence anew.
struct RestoreRun {
  std::vector<float> restored, recomputed;  // the continuation's logits, every new token
  RankPools original, fresh;                // the prefix's rows where computed, and where restored
  std::vector<SlotId> original_slots, fresh_slots;
  size_t record_bytes_per_token = 0;  // the host pool's: every rank's records
};

RestoreRun restore_and_continue(const TinyModel& m, int size, CodecKind codec) {
  RestoreRun run;
  auto model = CpuTpModel::create(m.shape, m.weights, size);
  EXPECT_TRUE(model.is_ok());
  std::vector<TokenId> tokens;
  for (int i = 0; i < 30; ++i) tokens.push_back(static_cast<TokenId>((i * 37 + 11) % m.shape.vocab_size));
  constexpr size_t kPrefix = 21;
  run.original = rank_pools(m.shape, size, 64);
  run.original_slots = slot_range(3, kPrefix);
  EXPECT_TRUE((*model)->forward(run.original.pools, std::span(tokens).first(kPrefix), run.original_slots, 0).is_ok());

  HostKvPoolOptions ho;
  ho.codec = codec;
  ho.capacity_tokens = 64;
  auto l2 = HostKvPool::create(tp_host_geometry(rank_geometry(m.shape, size)), ho, 64);
  EXPECT_TRUE(l2.is_ok()) << l2.status().to_string();
  run.record_bytes_per_token = (*l2)->bytes_per_token();
  auto l2_slots = (*l2)->allocate(kPrefix);
  EXPECT_TRUE(l2_slots.is_ok());
  {
    auto engine = make_cpu_transfer_engine(run.original.pools, **l2);
    EXPECT_TRUE(engine.is_ok()) << engine.status().to_string();
    auto ticket = (*engine)->backup(run.original_slots, *l2_slots);
    EXPECT_TRUE(ticket.is_ok());
    EXPECT_TRUE((*engine)->wait(*ticket).is_ok());
  }
  // Restored into fresh pools, at other slots, while the continuation runs.
  run.fresh = rank_pools(m.shape, size, 64);
  run.fresh_slots = slot_range(30, tokens.size());
  auto engine = make_cpu_transfer_engine(run.fresh.pools, **l2);
  EXPECT_TRUE(engine.is_ok());
  auto load = (*engine)->load(*l2_slots, std::span(run.fresh_slots).first(kPrefix));
  EXPECT_TRUE(load.is_ok());
  auto restored = (*model)->forward(run.fresh.pools, tokens, run.fresh_slots, kPrefix, /*all_logits=*/true,
                                    [&](int layer) { return (*engine)->wait_layer(*load, layer); });
  EXPECT_TRUE(restored.is_ok()) << restored.status().to_string();
  if (restored.is_ok()) run.restored = std::move(*restored);
  run.fresh_slots.resize(kPrefix);

  RankPools anew = rank_pools(m.shape, size, 64);
  auto whole = (*model)->forward(anew.pools, tokens, slot_range(0, tokens.size()), 0, /*all_logits=*/true);
  EXPECT_TRUE(whole.is_ok());
  if (whole.is_ok()) run.recomputed.assign(whole->end() - static_cast<ptrdiff_t>(run.restored.size()), whole->end());
  return run;
}

// Every rank's rows of (layer, part) at `slots`.
std::vector<uint16_t> rows_of(DeviceKvPool& pool, int layer, KvPart part, std::span<const SlotId> slots) {
  std::vector<uint16_t> rows(slots.size() * pool.row_elements(part));
  EXPECT_TRUE(pool.read_rows(layer, part, slots, rows.data()).is_ok());
  return rows;
}

TEST(TensorParallelRestore, Bf16RestoreGivesTheLogitsOfRecomputingBitForBit) {
  const TinyModel m;
  for (int size : {2, 4}) {
    SCOPED_TRACE("tp " + std::to_string(size));
    RestoreRun run = restore_and_continue(m, size, CodecKind::kBf16);
    ASSERT_FALSE(run.restored.empty());
    EXPECT_EQ(run.restored, run.recomputed);
    // Each rank got back its own heads (replicas included), not another rank's.
    for (int r = 0; r < size; ++r)
      for (int layer = 0; layer < m.shape.num_layers; ++layer)
        for (KvPart part : {KvPart::kK, KvPart::kV})
          EXPECT_EQ(rows_of(*run.fresh.pools[static_cast<size_t>(r)], layer, part, run.fresh_slots),
                    rows_of(*run.original.pools[static_cast<size_t>(r)], layer, part, run.original_slots))
              << "rank " << r << ", layer " << layer;
    // The host pool holds size ranks' records of one KV head's share each.
    const size_t rank_bytes =
        static_cast<size_t>(m.shape.num_layers) * 2 * rank_geometry(m.shape, size).row_shape(KvPart::kK).elements() * 2;
    EXPECT_EQ(run.record_bytes_per_token, static_cast<size_t>(size) * rank_bytes);
  }
}

TEST(TensorParallelRestore, Int8RestoreIsEachRanksCodecRoundTripWithinTolerance) {
  const TinyModel m;
  RestoreRun run = restore_and_continue(m, 2, CodecKind::kInt8);
  ASSERT_FALSE(run.restored.empty());
  // Each rank's restored rows are exactly the INT8 round trip of its own rows,
  // encoded per record of its KV heads — so within the codec's bound.
  const RowShape shape = rank_geometry(m.shape, 2).row_shape(KvPart::kK);
  const auto layout = RecordLayout::make(CodecKind::kInt8, shape);
  ASSERT_TRUE(layout.is_ok());
  for (int r = 0; r < 2; ++r)
    for (int layer = 0; layer < m.shape.num_layers; ++layer)
      for (KvPart part : {KvPart::kK, KvPart::kV}) {
        const auto original = rows_of(*run.original.pools[static_cast<size_t>(r)], layer, part, run.original_slots);
        std::vector<std::byte> records(layout->record_bytes * run.original_slots.size());
        std::vector<uint16_t> round_trip(original.size());
        encode_rows(*layout, original.data(), shape.elements(), run.original_slots.size(), records.data(), nullptr);
        decode_rows(*layout, records.data(), run.original_slots.size(), round_trip.data(), shape.elements());
        EXPECT_EQ(rows_of(*run.fresh.pools[static_cast<size_t>(r)], layer, part, run.fresh_slots), round_trip)
            << "rank " << r << ", layer " << layer;
        EXPECT_NE(round_trip, original) << "int8 should change some value";
      }
  // The continuation reads the quantised prefix: close to recomputing, not equal.
  EXPECT_NE(run.restored, run.recomputed);
  EXPECT_LT(relative_error(run.restored, run.recomputed), 5e-2);
}

// The transfer engine over two ranks, holding rank 1's part of a load's layer 0.
TEST(TensorParallelTransfer, ALayerIsReadyOnlyOnceEveryRanksPartIs) {
  const TinyModel m;
  std::mutex mutex;
  std::condition_variable changed;
  bool held = false, released = false;
  TransferEngineOptions options;
  options.workers = 1;
  options.before_rank_layer = [&](Ticket, TransferKind kind, int rank, int layer) {
    if (kind == TransferKind::kLoad && rank == 1 && layer == 0) {
      std::unique_lock lock(mutex);
      held = true;
      changed.notify_all();
      changed.wait(lock, [&] { return released; });
    }
    return Status::ok();
  };
  RankPools p = rank_pools(m.shape, 2, 16);
  HostKvPoolOptions ho;
  ho.capacity_tokens = 16;
  auto l2 = HostKvPool::create(tp_host_geometry(rank_geometry(m.shape, 2)), ho, 16);
  ASSERT_TRUE(l2.is_ok());
  auto engine = make_cpu_transfer_engine(p.pools, **l2, options);
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  auto slots = (*l2)->allocate(4);
  ASSERT_TRUE(slots.is_ok());
  const std::vector<SlotId> l1_slots = slot_range(0, 4);
  auto load = (*engine)->load(*slots, l1_slots);
  ASSERT_TRUE(load.is_ok());
  {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return held; });
  }
  // Rank 0's part of layer 0 is done; rank 1's is not: the layer is not ready.
  // (Released before any assertion can return, or the engine would wait forever.)
  const Result<bool> ready = (*engine)->layer_ready(*load, 0);
  {
    std::lock_guard lock(mutex);
    released = true;
  }
  changed.notify_all();
  ASSERT_TRUE(ready.is_ok()) << ready.status().to_string();
  EXPECT_FALSE(*ready);
  EXPECT_TRUE((*engine)->wait_layer(*load, 0).is_ok());
  EXPECT_TRUE(*(*engine)->layer_ready(*load, 0));
  EXPECT_TRUE((*engine)->wait(*load).is_ok());
}

TEST(TensorParallelTransfer, ARankThatFailsFailsTheWholeOperation) {
  const TinyModel m;
  TransferEngineOptions options;
  options.before_rank_layer = [](Ticket, TransferKind, int rank, int layer) {
    return rank == 1 && layer == 2 ? data_loss("injected: rank 1, layer 2") : Status::ok();
  };
  RankPools p = rank_pools(m.shape, 2, 16);
  HostKvPoolOptions ho;
  ho.capacity_tokens = 16;
  auto l2 = HostKvPool::create(tp_host_geometry(rank_geometry(m.shape, 2)), ho, 16);
  ASSERT_TRUE(l2.is_ok());
  auto engine = make_cpu_transfer_engine(p.pools, **l2, options);
  ASSERT_TRUE(engine.is_ok());
  auto slots = (*l2)->allocate(4);
  ASSERT_TRUE(slots.is_ok());
  for (TransferKind kind : {TransferKind::kBackup, TransferKind::kLoad}) {
    auto ticket = kind == TransferKind::kBackup ? (*engine)->backup(slot_range(0, 4), *slots)
                                                : (*engine)->load(*slots, slot_range(0, 4));
    ASSERT_TRUE(ticket.is_ok());
    const Status status = (*engine)->wait(*ticket);
    EXPECT_EQ(status.code(), StatusCode::kDataLoss) << status.to_string();
    EXPECT_FALSE(*(*engine)->layer_ready(*ticket, 2));
    EXPECT_EQ((*engine)->wait_layer(*ticket, 0).code(), StatusCode::kDataLoss) << "the whole operation failed";
  }
  const auto done = (*engine)->poll();
  ASSERT_EQ(done.size(), 2u);
  for (const Completion& c : done) EXPECT_FALSE(c.status.is_ok());
  EXPECT_EQ((*engine)->stats().failed_ops, 2u);
}

TEST(TensorParallelTransfer, RefusesPoolsThatDoNotFitTogether) {
  const TinyModel m;
  RankPools p = rank_pools(m.shape, 2, 16);
  HostKvPoolOptions ho;
  ho.capacity_tokens = 16;
  // A host pool of one rank's records only.
  auto one_rank = HostKvPool::create(rank_geometry(m.shape, 2), ho, 16);
  ASSERT_TRUE(one_rank.is_ok());
  expect_error(make_cpu_transfer_engine(p.pools, **one_rank), StatusCode::kInvalidArgument, {"2 ranks' records"});
  auto l2 = HostKvPool::create(tp_host_geometry(rank_geometry(m.shape, 2)), ho, 16);
  ASSERT_TRUE(l2.is_ok());
  // A rank pool of the whole model's heads, or of other slots.
  auto whole = m.pool(16);
  std::vector<DeviceKvPool*> mixed = {p.pools[0], whole.get()};
  expect_error(make_cpu_transfer_engine(mixed, **l2), StatusCode::kInvalidArgument, {"rank 1"});
  RankPools bigger = rank_pools(m.shape, 2, 32);
  mixed = {p.pools[0], bigger.pools[1]};
  expect_error(make_cpu_transfer_engine(mixed, **l2), StatusCode::kInvalidArgument, {"rank 1", "slots"});
  mixed = {p.pools[0], nullptr};
  expect_error(make_cpu_transfer_engine(mixed, **l2), StatusCode::kInvalidArgument, {"missing"});
  EXPECT_TRUE(make_cpu_transfer_engine(p.pools, **l2).is_ok());
}

ServeConfig tiny_qwen3_config(int tp_size) {
  ServeConfig c;
  c.model_dir = std::string(HIQ_TEST_MODELS_DIR) + "/tiny-qwen3";  // 4 query heads, 2 KV heads, 160 MLP columns
  c.max_total_tokens = 256;
  c.tp_size = tp_size;
  return c;
}

TEST(TensorParallelServeConfig, RefusesSizesBelowOneAndAboveTheBound) {
  for (int size : {0, -1, -8, ServeConfig::kMaxTpSize + 1})
    expect_error(Result<int>(tiny_qwen3_config(size).validate()), StatusCode::kInvalidArgument,
                 {"tp_size must be in [1, 256], got " + std::to_string(size)});
  EXPECT_TRUE(tiny_qwen3_config(1).validate().is_ok());
  EXPECT_TRUE(tiny_qwen3_config(2).validate().is_ok());
}

TEST(TensorParallelServeConfig, PlacesCudaRanksOnGpusAndNamesABadPlacement) {
  ServeConfig cuda = tiny_qwen3_config(2);
  cuda.device = "cuda";
  EXPECT_TRUE(cuda.validate().is_ok()) << cuda.validate().to_string();  // rank r on GPU r, NCCL
  cuda.tp_devices = {0, 0};
  expect_error(Result<int>(cuda.validate()), StatusCode::kInvalidArgument,
               {"tp_devices put ranks 0 and 1 on GPU 0, which NCCL refuses"});
  cuda.tp_collective = TpCollective::kPeer;  // ours may share a GPU
  EXPECT_TRUE(cuda.validate().is_ok()) << cuda.validate().to_string();
  cuda.tp_devices = {1};
  expect_error(Result<int>(cuda.validate()), StatusCode::kInvalidArgument, {"tp_devices list 1 GPU for 2 ranks"});
  cuda.tp_size = 1;
  cuda.tp_devices = {3};
  expect_error(Result<int>(cuda.validate()), StatusCode::kInvalidArgument, {"tp_devices", "tp_size above 1"});
  ServeConfig cpu = tiny_qwen3_config(2);
  cpu.tp_devices = {0, 1};
  expect_error(Result<int>(cpu.validate()), StatusCode::kInvalidArgument, {"tp_devices", "needs device cuda"});
}

TEST(TensorParallelServingStack, RefusesASizeTheModelCannotSplitNamingWhat) {
  // 3 and 8 do not divide the 4 query heads; the stack says so instead of starting.
  for (int size : {3, 8}) {
    auto stack = ServingStack::create(tiny_qwen3_config(size));
    expect_error(stack, StatusCode::kInvalidArgument, {std::to_string(size) + " ranks", "query heads"});
  }
}

TEST(TensorParallelServingStack, ServesTheCommittedModelOverTheRanksWithHostCapacityFromEveryRanksBytes) {
  ServeConfig c = tiny_qwen3_config(1);
  c.host.size_bytes = 1 << 20;
  auto one = ServingStack::create(c);
  ASSERT_TRUE(one.is_ok()) << one.status().to_string();
  EXPECT_EQ((*one)->tp_size(), 1);
  for (int size : {2, 4}) {
    SCOPED_TRACE("tp " + std::to_string(size));
    c.tp_size = size;
    auto stack = ServingStack::create(c);
    ASSERT_TRUE(stack.is_ok()) << stack.status().to_string();
    EXPECT_EQ((*stack)->tp_size(), size);
    // Split KV heads (tp 2) cost what one rank's do; replicated (tp 4: one head
    // on two ranks each) twice as much, so the same budget holds half the tokens.
    const size_t expected_bytes = (*one)->host_pool()->bytes_per_token() * (size == 4 ? 2 : 1);
    EXPECT_EQ((*stack)->host_pool()->bytes_per_token(), expected_bytes);
    EXPECT_EQ((*stack)->host_capacity_tokens(), (*one)->host_capacity_tokens() / (size == 4 ? 2 : 1));

    const LoadedModel& checkpoint = (*stack)->model().checkpoint();
    auto direct = CpuTpModel::create(checkpoint.shape(), checkpoint.weights(), size);
    ASSERT_TRUE(direct.is_ok());
    Request r;
    for (int i = 0; i < 20; ++i) r.prompt.push_back((i * 17 + 3) % (*stack)->vocab_size());
    r.max_new_tokens = 5;
    const std::vector<TokenId> prompt = r.prompt;
    auto stream = (*stack)->engine().submit(std::move(r));
    ASSERT_TRUE(stream.is_ok()) << stream.status().to_string();
    std::vector<TokenId> tokens;
    RequestResult result;
    while (auto event = (*stream)->next(60s)) {
      if (event->kind == GenerationEvent::Kind::kToken)
        tokens.push_back(event->token);
      else {
        result = std::move(event->result);
        break;
      }
    }
    ASSERT_TRUE(result.status.is_ok()) << result.status.to_string();
    EXPECT_EQ(tokens, generate_alone_tp(**direct, prompt, 5));
  }
}

// The tokens of one request through `stack`, and how many prompt tokens the storage tier gave it.
std::pair<std::vector<TokenId>, size_t> generate(ServingStack& stack, const std::vector<TokenId>& prompt,
                                                 int new_tokens) {
  Request r;
  r.prompt = prompt;
  r.max_new_tokens = new_tokens;
  auto stream = stack.engine().submit(std::move(r));
  EXPECT_TRUE(stream.is_ok()) << stream.status().to_string();
  std::vector<TokenId> tokens;
  if (!stream.is_ok()) return {tokens, 0};
  while (auto event = (*stream)->next(60s)) {
    if (event->kind == GenerationEvent::Kind::kToken) {
      tokens.push_back(event->token);
      continue;
    }
    EXPECT_TRUE(event->result.status.is_ok()) << event->result.status.to_string();
    return {tokens, event->result.cached_storage_tokens};
  }
  ADD_FAILURE() << "the request did not finish";
  return {tokens, 0};
}

// The third tier under tensor parallelism stores blocks of every rank's
// records, as the host tier holds them. A restarted server of the same size
// reads a prompt's whole blocks back from the file backend and generates the
// direct pass's tokens (bf16 records: the restored KV is the computed KV);
// a server of another size shares none of those blocks.
TEST(TensorParallelServingStack, AStorageTierHoldsEveryRanksRecordsAcrossARestart) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("hiq_tp_storage_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                     "_" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  const auto config = [&](int tp_size) {
    ServeConfig c = tiny_qwen3_config(tp_size);
    c.host.codec = KvCodecs(CodecKind::kBf16);
    c.host.size_bytes = 1 << 20;
    c.storage.backend = StorageBackendKind::kFile;
    c.storage.file.path = dir.string();
    c.storage.file.capacity_bytes = 64 << 20;
    c.storage.prefetch_policy = StoragePrefetchPolicy::kWaitComplete;
    c.storage.prefetch_threshold_tokens = 16;
    c.storage_block_tokens = 16;
    return c;
  };
  std::vector<TokenId> prompt;
  for (int i = 0; i < 100; ++i) prompt.push_back((i * 29 + 11) % 256);  // the model's vocabulary: 256
  constexpr size_t kStoredTokens = 96;  // the prompt's whole blocks of 16, all but its last token's
  {
    auto first = ServingStack::create(config(2));
    ASSERT_TRUE(first.is_ok()) << first.status().to_string();
    const auto [tokens, from_storage] = generate(**first, prompt, 4);
    EXPECT_EQ(from_storage, 0u);
    // Blocks are written after their backups, off the request's path: wait for all six.
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while ((*first)->engine().stats().storage_tier.written_blocks < kStoredTokens / 16 &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(10ms);
    ASSERT_EQ((*first)->engine().stats().storage_tier.written_blocks, kStoredTokens / 16);
  }
  auto restarted = ServingStack::create(config(2));
  ASSERT_TRUE(restarted.is_ok()) << restarted.status().to_string();
  const LoadedModel& checkpoint = (*restarted)->model().checkpoint();
  auto direct = CpuTpModel::create(checkpoint.shape(), checkpoint.weights(), 2);
  ASSERT_TRUE(direct.is_ok());
  const auto [tokens, from_storage] = generate(**restarted, prompt, 4);
  EXPECT_EQ(from_storage, kStoredTokens);
  EXPECT_EQ(tokens, generate_alone_tp(**direct, prompt, 4));
  restarted->reset();

  auto other_size = ServingStack::create(config(4));
  ASSERT_TRUE(other_size.is_ok()) << other_size.status().to_string();
  EXPECT_EQ(generate(**other_size, prompt, 1).second, 0u) << "a tp-4 server read tp-2 blocks";
  other_size->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hiq
