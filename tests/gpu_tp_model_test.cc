// Tensor parallelism on GPUs (model/cuda_tp_model.h): the ranks' pass
// against the CPU's tensor-parallel pass and the one-rank GPU pass, its
// determinism, and failures on one rank that must neither hang the others
// nor outlive the pass. Every rank runs on GPU 0 through the peer
// collective, so one GPU runs all of it; NCCL's ranks need two GPUs.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include "engine/serving_engine.h"
#include "gpu_test_policy.h"
#include "memory/cuda_device_kv_pool.h"
#include "model/cuda_model.h"
#include "model/cuda_tp_model.h"
#include "model/loaded_model.h"
#include "model/tensor_parallel.h"
#include "relative_error.h"
#include "server/serving_stack.h"
#include "tensor_parallel_test_util.h"
#include "tiny_model.h"

namespace hiq {
namespace {

using testing::relative_error;
using testing::TinyModel;

class GpuTpModelTest : public ::testing::Test {
 protected:
  void SetUp() override { HIQ_SKIP_OR_FAIL_WITHOUT_GPU(); }
};

// qwen3_like(): eight query heads over two KV heads of 128. Two ranks split
// the KV heads; four and eight replicate them.
using testing::qwen3_like;

using testing::iota_slots;
using testing::random_tokens;

// Every rank on GPU 0, through the peer collective.
CudaTpOptions on_one_gpu(int size) {
  CudaTpOptions o;
  o.devices.assign(static_cast<size_t>(size), 0);
  o.collective = TpCollective::kPeer;
  return o;
}

// Rank pools in GPU memory (on each rank's GPU), of the ranks' geometry.
struct GpuRankPools {
  std::vector<std::unique_ptr<DeviceKvPool>> owned;
  std::vector<DeviceKvPool*> pools;
};

GpuRankPools gpu_rank_pools(const CudaTpModel& model, size_t slots) {
  GpuRankPools p;
  for (int r = 0; r < model.size(); ++r) {
    auto pool = make_cuda_device_kv_pool(model.device(r), testing::rank_geometry(model.shape(), model.size()), slots);
    EXPECT_TRUE(pool.is_ok()) << pool.status().to_string();
    if (!pool) break;
    p.pools.push_back(pool->get());
    p.owned.push_back(std::move(*pool));
  }
  return p;
}

// Whether `served` is the split model's own greedy continuation of
// `prompt` (run alone, one pass a step, on fresh pools), up to the first
// near tie of its logits (5 % of their RMS) — past which the two cannot be
// compared: a served step computes a few tokens on a cached prefix, the
// direct one the whole prompt, through products of other shapes.
::testing::AssertionResult is_greedy(CudaTpModel& model, std::vector<int32_t> tokens,
                                     const std::vector<int32_t>& served) {
  GpuRankPools p = gpu_rank_pools(model, tokens.size() + served.size());
  const std::vector<SlotId> slots = iota_slots(tokens.size() + served.size());
  size_t first_new = 0;
  for (size_t step = 0; step < served.size(); ++step) {
    const ModelSequence seq{tokens, std::span(slots).first(tokens.size()), first_new};
    auto r = model.forward(p.pools, std::span(&seq, 1), LogitsWanted::kLast);
    if (!r) return ::testing::AssertionFailure() << r.status().to_string();
    const int32_t direct = r->next_tokens[0];
    if (direct != served[step]) {
      double rms = 0;
      for (float x : r->logits) rms += double{x} * x;
      const double margin = 0.05 * std::sqrt(rms / static_cast<double>(r->logits.size()));
      const double gap = r->logits[static_cast<size_t>(direct)] - r->logits[static_cast<size_t>(served[step])];
      if (gap < margin) return ::testing::AssertionSuccess();
      return ::testing::AssertionFailure() << "step " << step << ": served " << served[step] << ", direct " << direct
                                           << " (logit gap " << gap << ", not a near tie)";
    }
    first_new = tokens.size();
    tokens.push_back(direct);
  }
  return ::testing::AssertionSuccess();
}

Result<ModelOutput> prefill(CudaTpModel& model, std::span<DeviceKvPool* const> pools, std::span<const int32_t> tokens,
                            std::span<const SlotId> slots, size_t first_new = 0,
                            const BeforeRankAttention& hook = nullptr) {
  const ModelSequence seq{tokens, slots, first_new};
  return model.forward(pools, std::span(&seq, 1), LogitsWanted::kAll, hook);
}

TEST_F(GpuTpModelTest, RanksOnOneGpuMatchTheCpuSplitAndTheOneRankPass) {
  const TinyModel tiny(qwen3_like());
  const std::vector<int32_t> tokens = random_tokens(300, tiny.spec.vocab_size, 1);
  const std::vector<SlotId> slots = iota_slots(tokens.size(), 100);
  auto one = make_cuda_model(tiny.shape, tiny.weights);
  ASSERT_TRUE(one.is_ok()) << one.status().to_string();
  auto one_l1 = make_cuda_device_kv_pool(TinyModel::geometry_of(tiny.spec), 512);
  ASSERT_TRUE(one_l1.is_ok());
  const ModelSequence seq{tokens, slots, 0};
  auto whole = (*one)->forward(**one_l1, std::span(&seq, 1), LogitsWanted::kAll);
  ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();

  for (int size : {2, 4, 8}) {
    SCOPED_TRACE("tp_size " + std::to_string(size));
    auto model = make_cuda_tp_model(tiny.shape, tiny.weights, size, on_one_gpu(size));
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    EXPECT_EQ((*model)->rank_shape(0).num_heads, 8 / size);
    EXPECT_EQ((*model)->rank_shape(0).num_kv_heads, std::max(1, 2 / size));
    GpuRankPools gpu = gpu_rank_pools(**model, 512);
    ASSERT_EQ(gpu.pools.size(), static_cast<size_t>(size));
    auto out = prefill(**model, gpu.pools, tokens, slots);
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();

    auto split = CpuTpModel::create(tiny.shape, tiny.weights, size);
    ASSERT_TRUE(split.is_ok());
    testing::RankPools cpu = testing::rank_pools(tiny.shape, size, 512);
    auto reference = (*split)->forward(cpu.pools, tokens, slots, 0, /*all_logits=*/true);
    ASSERT_TRUE(reference.is_ok()) << reference.status().to_string();
    const double vs_cpu = relative_error(out->logits, *reference);
    const double vs_one = relative_error(out->logits, whole->logits);
    std::printf("tp %d, 300-token prefill: relative error %.2e vs the CPU split, %.2e vs one GPU rank\n", size,
                vs_cpu, vs_one);
    EXPECT_LT(vs_cpu, 2e-2);
    EXPECT_LT(vs_one, 2e-2);
    EXPECT_EQ(out->next_tokens.size(), 1u);

    // The last 100 tokens again, on the first 200's KV in every rank's pool.
    auto continued = prefill(**model, gpu.pools, tokens, slots, 200);
    ASSERT_TRUE(continued.is_ok()) << continued.status().to_string();
    const std::span<const float> rows =
        std::span<const float>(out->logits).subspan(200 * static_cast<size_t>(tiny.spec.vocab_size));
    EXPECT_LT(relative_error(continued->logits, std::vector<float>(rows.begin(), rows.end())), 1e-2);
  }
}

TEST_F(GpuTpModelTest, ThePeerSumGivesTheSameBitsRunAfterRun) {
  const TinyModel tiny(qwen3_like());
  auto model = make_cuda_tp_model(tiny.shape, tiny.weights, 4, on_one_gpu(4));
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  GpuRankPools gpu = gpu_rank_pools(**model, 256);
  const std::vector<int32_t> tokens = random_tokens(130, tiny.spec.vocab_size, 2);
  const std::vector<SlotId> slots = iota_slots(tokens.size());
  auto first = prefill(**model, gpu.pools, tokens, slots);
  auto second = prefill(**model, gpu.pools, tokens, slots);
  ASSERT_TRUE(first.is_ok() && second.is_ok());
  EXPECT_EQ(first->logits, second->logits);
}

// The tiny model split over `size` ranks on GPU 0, a 64-token prompt, and
// the logits of a pass that nothing disturbed (each failure test compares
// the pass after its failure with them).
struct SplitOnOneGpu {
  SplitOnOneGpu(int size, uint32_t seed)
      : tiny(qwen3_like()),
        tokens(random_tokens(64, tiny.spec.vocab_size, seed)),
        slots(iota_slots(tokens.size())) {
    auto made = make_cuda_tp_model(tiny.shape, tiny.weights, size, on_one_gpu(size));
    EXPECT_TRUE(made.is_ok()) << made.status().to_string();
    if (!made) return;
    model = std::move(*made);
    gpu = gpu_rank_pools(*model, 256);
    auto first = prefill(*model, gpu.pools, tokens, slots);
    EXPECT_TRUE(first.is_ok()) << first.status().to_string();
    if (first) good = std::move(first->logits);
  }
  bool ready() const { return model && !good.empty(); }
  Result<ModelOutput> run(std::span<DeviceKvPool* const> pools, const BeforeRankAttention& hook = nullptr) {
    return prefill(*model, pools, tokens, slots, 0, hook);
  }

  TinyModel tiny;
  std::vector<int32_t> tokens;
  std::vector<SlotId> slots;
  std::unique_ptr<CudaTpModel> model;
  GpuRankPools gpu;
  std::vector<float> good;
};

TEST_F(GpuTpModelTest, AHookThatFailsOnOneRankFailsOnlyThatPass) {
  SplitOnOneGpu s(2, 3);
  ASSERT_TRUE(s.ready());
  std::atomic<int> calls{0};
  const BeforeRankAttention fails_on_rank1 = [&](int rank, int layer, void*) {
    ++calls;
    return rank == 1 && layer == 1 ? internal_error("restore lost") : Status::ok();
  };
  auto failed = s.run(s.gpu.pools, fails_on_rank1);
  ASSERT_FALSE(failed.is_ok());
  EXPECT_EQ(failed.status().message(), "tensor-parallel rank 1: restore lost");
  EXPECT_EQ(calls.load(), 2 * s.tiny.spec.num_layers) << "every rank ran every layer";
  auto again = s.run(s.gpu.pools);
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_EQ(again->logits, s.good);
}

TEST_F(GpuTpModelTest, ARankThatFailsLeavesTheOthersToStopAndTheNextPassRuns) {
  SplitOnOneGpu s(4, 4);
  ASSERT_TRUE(s.ready());
  // Rank 2 gets a pool of the whole model's geometry: its pass fails before
  // its first sum, while the others have started theirs.
  auto wrong = make_cuda_device_kv_pool(TinyModel::geometry_of(s.tiny.spec), 256);
  ASSERT_TRUE(wrong.is_ok());
  std::vector<DeviceKvPool*> pools = s.gpu.pools;
  pools[2] = wrong->get();
  auto failed = s.run(pools);
  ASSERT_FALSE(failed.is_ok());
  EXPECT_TRUE(failed.status().message().starts_with("tensor-parallel rank 2: ")) << failed.status().to_string();
  auto again = s.run(s.gpu.pools);
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_EQ(again->logits, s.good);
  // And a pool count that is not the ranks'.
  EXPECT_EQ(s.run(std::span(s.gpu.pools).first(3)).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(GpuTpModelTest, NcclRanksOnTwoGpusMatchThePeerRanks) {
  int gpus = 0;
  ASSERT_EQ(cudaGetDeviceCount(&gpus), cudaSuccess);
  if (gpus < 2) GTEST_SKIP() << "NCCL's ranks need two GPUs; this machine has " << gpus;
  const TinyModel tiny(qwen3_like());
  CudaTpOptions nccl;
  nccl.devices = {0, 1};
  auto model = make_cuda_tp_model(tiny.shape, tiny.weights, 2, nccl);
  if (!model && model.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << model.status().to_string();
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  CudaTpOptions peer = on_one_gpu(2);
  auto reference = make_cuda_tp_model(tiny.shape, tiny.weights, 2, peer);
  ASSERT_TRUE(reference.is_ok()) << reference.status().to_string();
  GpuRankPools pools = gpu_rank_pools(**model, 512), reference_pools = gpu_rank_pools(**reference, 512);
  const std::vector<int32_t> tokens = random_tokens(300, tiny.spec.vocab_size, 5);
  const std::vector<SlotId> slots = iota_slots(tokens.size());
  auto out = prefill(**model, pools.pools, tokens, slots);
  auto want = prefill(**reference, reference_pools.pools, tokens, slots);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  ASSERT_TRUE(want.is_ok());
  const double error = relative_error(out->logits, want->logits);
  std::printf("NCCL over GPUs 0 and 1 vs the peer sum on GPU 0: relative error %.2e\n", error);
  EXPECT_LT(error, 1e-2);
}

// `hiq serve --device cuda --tp-size 2` as a stack, both ranks on GPU 0: 6
// groups of 3 prompts (a shared 40-token prefix, a 6-token question), twice;
// with 160 L1 slots the second pass restores the prefixes from L2 through
// the ranks' transfer engines. BF16 records restore the computed KV, so
// every request gets the tokens of the split model run alone (up to a near
// tie).
TEST_F(GpuTpModelTest, AStackServesAndRestoresOverRanksOnOneGpu) {
  ServeConfig c;
  c.model_dir = std::string(HIQ_TEST_MODELS_DIR) + "/tiny-qwen3";
  c.device = "cuda";
  c.tp_size = 2;
  c.tp_devices = {0, 0};
  c.tp_collective = TpCollective::kPeer;
  c.max_total_tokens = 160;
  c.host.codec = KvCodecs(CodecKind::kBf16);
  c.host.ratio = 4;
  auto stack = ServingStack::create(c);
  ASSERT_TRUE(stack.is_ok()) << stack.status().to_string();
  ASSERT_EQ((*stack)->tp_size(), 2);
  const LoadedModel& checkpoint = (*stack)->model().checkpoint();
  auto direct = make_cuda_tp_model(checkpoint.shape(), checkpoint.weights(), 2, on_one_gpu(2));
  ASSERT_TRUE(direct.is_ok()) << direct.status().to_string();
  size_t restored = 0, requests = 0;
  for (int pass = 0; pass < 2; ++pass)
    for (int g = 0; g < 6; ++g)
      for (int q = 0; q < 3; ++q) {
        Request r;
        for (int i = 0; i < 40; ++i) r.prompt.push_back(static_cast<TokenId>((g * 31 + i * 7) % 97));
        for (int i = 0; i < 6; ++i) r.prompt.push_back(static_cast<TokenId>((q * 13 + i * 5 + pass * 29 + 50) % 97));
        r.max_new_tokens = 4;
        const std::vector<TokenId> prompt = r.prompt;
        auto stream = (*stack)->engine().submit(std::move(r));
        ASSERT_TRUE(stream.is_ok()) << stream.status().to_string();
        RequestResult result;
        while (auto event = (*stream)->next(std::chrono::seconds(60)))
          if (event->kind == GenerationEvent::Kind::kFinished) {
            result = std::move(event->result);
            break;
          }
        ASSERT_TRUE(result.status.is_ok()) << result.status.to_string();
        ASSERT_EQ(result.output.size(), 4u);
        EXPECT_TRUE(is_greedy(**direct, prompt, result.output)) << "pass " << pass << ", request " << requests;
        restored += result.cached_l2_tokens;
        ++requests;
      }
  EXPECT_GT(restored, 0u) << "the second pass must restore prefixes from L2";
  EXPECT_EQ((*stack)->engine().stats().cache.load_back_failures, 0u);
}

}  // namespace
}  // namespace hiq
