// Demotion on the GPU (transfer/cuda_demoter.h): every job leaves the pool
// byte for byte as the CPU's demote_records does — over arbitrary record
// bytes (non-finite and out-of-range heads included), slots in several runs,
// chunks that cut runs, every ladder step, concurrent workers — and a job
// the GPU fails part way through is finished on the host with the same
// result. Skips without a GPU.
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <functional>
#include <random>

#include "gpu_test_policy.h"
#include "kv/model_config.h"
#include "memory/cuda_device_kv_pool.h"
#include "memory/host_kv_pool.h"
#include "transfer/cuda_demoter.h"
#include "transfer/demotion_engine.h"

namespace hiq {
namespace {

KvGeometry geometry(const char* json) { return *geometry_from_config_json(json, "test"); }

struct Case {
  const char* ladder;
  const char* config;
};

const Case kCases[] = {
    {"tiered:int8,int4h", R"({"model_type": "qwen3", "num_hidden_layers": 3, "num_attention_heads": 8,
                              "num_key_value_heads": 4, "head_dim": 128})"},
    {"tiered:bf16,int8,int4h", R"({"model_type": "qwen3", "num_hidden_layers": 2, "num_attention_heads": 4,
                                   "num_key_value_heads": 2, "head_dim": 64})"},
    {"tiered:fp8,int4", R"({"model_type": "qwen3", "num_hidden_layers": 3, "num_attention_heads": 6,
                            "num_key_value_heads": 3, "head_dim": 96})"},
};

class GpuDemotion : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    HIQ_SKIP_OR_FAIL_WITHOUT_GPU();
    build();
  }

  // The pool, its nodes' jobs and its bytes: the same every time.
  void build() {
    jobs_.clear();
    pinned_ = PinnedHostMemory();  // before the pool it pins goes
    HostKvPoolOptions o;
    ASSERT_TRUE(parse_host_codec(GetParam().ladder, o).is_ok());
    o.capacity_tokens = 96;
    auto made = HostKvPool::create(geometry(GetParam().config), o, 96);
    ASSERT_TRUE(made.is_ok()) << made.status().to_string();
    pool_ = std::move(*made);
    // Pinned, as a server's transfer engine pins its pool: the copies are then truly asynchronous.
    auto pinned = PinnedHostMemory::pin(pool_->plane(0, KvPart::kK), pool_->reserved_bytes());
    ASSERT_TRUE(pinned.is_ok()) << pinned.status().to_string();
    pinned_ = std::move(*pinned);
    // Blocks of rung 0; a node of two blocks with another between them lies
    // in two runs, as a node does whose tokens the allocator found apart.
    std::vector<std::vector<SlotId>> blocks;
    for (size_t n : {9, 14, 5, 11, 7, 20, 6}) blocks.push_back(*pool_->allocate(n, 0));
    const auto node = [&](std::initializer_list<size_t> parts) {
      std::vector<SlotId> slots;
      for (size_t p : parts) slots.insert(slots.end(), blocks[p].begin(), blocks[p].end());
      return slots;
    };
    for (const auto& slots : {node({0, 2}), node({1}), node({3, 5, 6}), node({4})})
      jobs_.push_back({slots, pool_->demoted_slots(slots, 0, 1), 0, 1});
    size_t runs = 0;
    for (const DemotionJob& job : jobs_) runs += demotion_runs(*pool_, job).size();
    ASSERT_GT(runs, jobs_.size()) << "no job lies in several runs";
    // Arbitrary bytes: every record decodes to something, NaN and huge values included.
    std::mt19937 rng(7);
    std::byte* base = pool_->plane(0, KvPart::kK);
    for (size_t i = 0; i < pool_->reserved_bytes(); ++i) base[i] = static_cast<std::byte>(rng());
    pristine_.assign(base, base + pool_->reserved_bytes());
  }

  std::byte* base() { return pool_->plane(0, KvPart::kK); }
  void restore_pristine() { std::memcpy(base(), pristine_.data(), pristine_.size()); }

  // The pool after demoting every job with `demote`, from the pristine bytes.
  template <typename Demote>
  std::vector<std::byte> demoted(Demote demote) {
    restore_pristine();
    for (const DemotionJob& job : jobs_) EXPECT_TRUE(demote(job).is_ok());
    return std::vector<std::byte>(base(), base() + pool_->reserved_bytes());
  }

  // A GPU demoter over the pool, `chunk` tokens at a time; null (and the
  // test failed) if it cannot be made.
  std::shared_ptr<CudaDemoter> gpu_demoter(size_t chunk, std::function<Status(size_t)> before_chunk = {}) {
    CudaDemoterOptions options;
    options.chunk_tokens = chunk;
    options.before_chunk = std::move(before_chunk);
    auto made = make_cuda_demoter(*pool_, options);
    EXPECT_TRUE(made.is_ok()) << made.status().to_string();
    return made.is_ok() ? *made : nullptr;
  }

  std::vector<std::byte> on_gpu(CudaDemoter& gpu) {
    return demoted([&](const DemotionJob& job) { return gpu.demote(job); });
  }

  std::vector<std::byte> on_cpu() {
    std::vector<std::byte> scratch;
    return demoted([&](const DemotionJob& job) { return demote_records(*pool_, job, scratch); });
  }

  std::unique_ptr<HostKvPool> pool_;
  PinnedHostMemory pinned_;  // pool_'s memory
  std::vector<DemotionJob> jobs_;
  std::vector<std::byte> pristine_;
};

// Byte equality of the whole pool; on a mismatch, where the first one is.
void expect_same_bytes(const std::vector<std::byte>& gpu, const std::vector<std::byte>& cpu) {
  ASSERT_EQ(gpu.size(), cpu.size());
  const auto mismatch = std::mismatch(gpu.begin(), gpu.end(), cpu.begin());
  EXPECT_TRUE(mismatch.first == gpu.end()) << "first differing byte at " << (mismatch.first - gpu.begin());
}

TEST_P(GpuDemotion, RecordsAreTheCpuDemotionsByteForByte) {
  const std::vector<std::byte> cpu = on_cpu();
  ASSERT_NE(cpu, pristine_) << "the CPU demotion changed nothing";
  // Chunks of 3 tokens cut runs; one of 256 holds every job whole.
  for (size_t chunk : {3, 256}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    const auto gpu = gpu_demoter(chunk);
    ASSERT_TRUE(gpu);
    expect_same_bytes(on_gpu(*gpu), cpu);
    EXPECT_EQ(gpu->stats().gpu_jobs, jobs_.size());
    EXPECT_EQ(gpu->stats().host_jobs, 0u);
  }
}

TEST_P(GpuDemotion, EveryRungDownIsTheCpus) {
  // Each node down the whole ladder, one rung a job, committing each step.
  const auto whole_ladder = [&](const std::function<Status(const DemotionJob&)>& demote) {
    std::vector<std::vector<SlotId>> nodes;
    for (const DemotionJob& job : jobs_) nodes.push_back(job.from);
    for (int rung = 0; rung + 1 < pool_->rungs(); ++rung)
      for (auto& slots : nodes) {
        DemotionJob job{slots, pool_->demoted_slots(slots, rung, rung + 1), rung, rung + 1};
        EXPECT_TRUE(demote(job).is_ok());
        EXPECT_TRUE(pool_->shrink(slots, rung + 1).is_ok());
        slots = job.to;
      }
    return std::vector<std::byte>(base(), base() + pool_->reserved_bytes());
  };
  std::vector<std::byte> scratch;
  const std::vector<std::byte> cpu =
      whole_ladder([&](const DemotionJob& job) { return demote_records(*pool_, job, scratch); });
  build();  // rung 0 again: the same slots and bytes
  const auto gpu = gpu_demoter(4);
  ASSERT_TRUE(gpu);
  expect_same_bytes(whole_ladder([&](const DemotionJob& job) { return gpu->demote(job); }), cpu);
}

// The GPU fails at the first chunk (nothing written yet) or the third (two
// chunks written in place): the host finishes each job, and the pool is the
// CPU's result all the same.
TEST_P(GpuDemotion, AJobTheGpuFailsPartWayIsFinishedOnTheHost) {
  const std::vector<std::byte> cpu = on_cpu();
  for (size_t fail_at : {0, 2}) {
    SCOPED_TRACE("the GPU fails at chunk " + std::to_string(fail_at));
    // Chunks of 3 tokens: every job has more than three.
    const auto gpu =
        gpu_demoter(3, [&](size_t chunk) { return chunk == fail_at ? unavailable("injected") : Status::ok(); });
    ASSERT_TRUE(gpu);
    expect_same_bytes(on_gpu(*gpu), cpu);
    EXPECT_EQ(gpu->stats().host_jobs, jobs_.size());
    EXPECT_EQ(gpu->stats().gpu_jobs, 0u);
  }
}

TEST_P(GpuDemotion, WorkersDemoteConcurrentlyThroughTheEngine) {
  const std::vector<std::byte> cpu = on_cpu();
  const auto gpu = gpu_demoter(5);
  ASSERT_TRUE(gpu);
  for (int round = 0; round < 3; ++round) {
    restore_pristine();
    DemotionEngine engine(*pool_, {.threads = 4, .codec_impl = CodecImpl::kAuto,
                                   .backend = demotion_backend(gpu), .before_job = {}});
    for (const DemotionJob& job : jobs_) engine.submit(job);
    engine.drain();
    for (const DemotionCompletion& c : engine.poll()) EXPECT_TRUE(c.status.is_ok()) << c.status.to_string();
    expect_same_bytes(std::vector<std::byte>(base(), base() + pool_->reserved_bytes()), cpu);
  }
  EXPECT_EQ(gpu->stats().gpu_jobs, 3 * jobs_.size());
}

std::string describe(const ::testing::TestParamInfo<Case>& param) {
  std::string name = param.param.ladder;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Ladders, GpuDemotion, ::testing::ValuesIn(kCases), describe);

TEST(GpuDemotionSetup, APoolOfOneCodecIsRefused) {
  HIQ_SKIP_OR_FAIL_WITHOUT_GPU();
  HostKvPoolOptions o;
  ASSERT_TRUE(parse_host_codec("int8", o).is_ok());
  o.capacity_tokens = 8;
  auto pool = HostKvPool::create(geometry(kCases[0].config), o, 8);
  ASSERT_TRUE(pool.is_ok());
  EXPECT_EQ(make_cuda_demoter(**pool).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace hiq
