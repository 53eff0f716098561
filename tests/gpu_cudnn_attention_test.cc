// cuDNN's fused flash attention (model/cuda/cudnn_attention.h) against our
// own attention kernel (the portable one, which gpu_attention_test.cc checks
// against a float64 reference) on the same random Q, K and V: fresh prompts
// whose lengths are and are not multiples of the tiles, a prompt after a
// cached prefix (the bottom-right causal mask), GQA groups of 4 and 2, and Q
// read from fused QKV rows (a token stride wider than its heads). Every
// output element is poisoned first, so one cuDNN skips is an error.
//
// Skipped without a GPU (failed under HIQ_REQUIRE_GPU=1, as every GPU test),
// and skipped with the reason when cuDNN cannot be loaded: cuDNN is optional
// at run time, found through LD_LIBRARY_PATH.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "cuda/buffers.h"
#include "gpu_test_policy.h"
#include "model/cuda/attention.h"
#include "model/cuda/cudnn_attention.h"

namespace hiq {
namespace {

struct Case {
  int q_len, kv_len, heads, kv_heads;
  bool qkv_rows = false;  // Q inside [token][Q | K | V] rows, as the forward pass has it
  int head_dim = 128;
};

// One sequence's inputs on the device, and both outputs.
struct Problem {
  Case c;
  int64_t q_stride = 0;
  cuda::DeviceMemory q, k, v;  // q: [token][q_stride]; k, v: [kv_len][kv_heads][head_dim]
};

cuda::DeviceMemory upload_random(size_t n, float stddev, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.f, stddev);
  std::vector<__nv_bfloat16> host(n);
  for (auto& x : host) x = __float2bfloat16_rn(normal(rng));
  auto memory = cuda::device_alloc(std::max<size_t>(1, n * 2), "test input");
  EXPECT_TRUE(memory.is_ok()) << memory.status().to_string();
  EXPECT_EQ(cudaMemcpy(memory->get(), host.data(), n * 2, cudaMemcpyHostToDevice), cudaSuccess);
  return std::move(*memory);
}

Problem make_problem(const Case& c, uint32_t seed) {
  Problem p;
  p.c = c;
  p.q_stride = static_cast<int64_t>(c.qkv_rows ? c.heads + 2 * c.kv_heads : c.heads) * c.head_dim;
  std::mt19937 rng(seed);
  p.q = upload_random(static_cast<size_t>(c.q_len) * p.q_stride, 1.5f, rng);  // peaked enough softmaxes
  p.k = upload_random(static_cast<size_t>(c.kv_len) * c.kv_heads * c.head_dim, 1.5f, rng);
  p.v = upload_random(static_cast<size_t>(c.kv_len) * c.kv_heads * c.head_dim, 1.f, rng);
  return p;
}

size_t out_elements(const Case& c) { return static_cast<size_t>(c.q_len) * c.heads * c.head_dim; }

// A fresh output buffer with every element NaN.
cuda::DeviceMemory poisoned_output(const Case& c) {
  auto out = cuda::device_alloc(out_elements(c) * 2, "out");
  EXPECT_TRUE(out.is_ok());
  EXPECT_EQ(cudaMemset(out->get(), 0xff, out_elements(c) * 2), cudaSuccess);
  return std::move(*out);
}

std::vector<float> download(const cuda::DeviceMemory& out, const Case& c) {
  std::vector<__nv_bfloat16> host(out_elements(c));
  EXPECT_EQ(cudaMemcpy(host.data(), out.get(), host.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<float> result(host.size());
  for (size_t i = 0; i < host.size(); ++i) result[i] = __bfloat162float(host[i]);
  return result;
}

// Our portable kernel on the problem, reading the context through slots 0 … kv_len − 1.
std::vector<float> run_ours(const Problem& p, int multiprocessors) {
  const Case& c = p.c;
  std::vector<uint32_t> slots(static_cast<size_t>(c.kv_len));
  std::iota(slots.begin(), slots.end(), 0u);
  const cuda::AttentionSequence sequence{0, c.q_len, c.kv_len, 0};
  auto slot_table = cuda::device_alloc(slots.size() * sizeof(uint32_t), "slots");
  auto sequences = cuda::device_alloc(sizeof(sequence), "sequences");
  EXPECT_TRUE(slot_table.is_ok() && sequences.is_ok());
  EXPECT_EQ(cudaMemcpy(slot_table->get(), slots.data(), slots.size() * sizeof(uint32_t), cudaMemcpyHostToDevice),
            cudaSuccess);
  EXPECT_EQ(cudaMemcpy(sequences->get(), &sequence, sizeof(sequence), cudaMemcpyHostToDevice), cudaSuccess);
  cuda::DeviceMemory out = poisoned_output(c);
  cuda::AttentionArgs a;
  a.q = static_cast<const __nv_bfloat16*>(p.q.get());
  a.q_token_stride = p.q_stride;
  a.out = static_cast<__nv_bfloat16*>(out.get());
  a.k_plane = static_cast<const __nv_bfloat16*>(p.k.get());
  a.v_plane = static_cast<const __nv_bfloat16*>(p.v.get());
  a.slots = static_cast<const uint32_t*>(slot_table->get());
  a.sequences = static_cast<const cuda::AttentionSequence*>(sequences->get());
  a.num_sequences = 1;
  a.max_q_len = c.q_len;
  a.max_kv_len = c.kv_len;
  a.num_tokens = c.q_len;
  a.heads = c.heads;
  a.kv_heads = c.kv_heads;
  a.head_dim = c.head_dim;
  a.scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
  a.kernel = cuda::AttentionKernel::kPortable;
  a.splits = cuda::attention_splits(a, multiprocessors);
  auto workspace = cuda::device_alloc(
      std::max<size_t>(1, cuda::attention_workspace_floats(a.splits, c.q_len, c.heads, c.head_dim)) * sizeof(float),
      "workspace");
  EXPECT_TRUE(workspace.is_ok());
  a.workspace = static_cast<float*>(workspace->get());
  const Status status = cuda::launch_attention(a, nullptr);
  EXPECT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return download(out, c);
}

cuda::CudnnAttentionShape shape_of(const Problem& p) {
  return {p.c.q_len, p.c.kv_len, p.c.heads, p.c.kv_heads, p.c.head_dim, p.q_stride};
}

std::vector<float> run_cudnn(cuda::CudnnAttention& cudnn, const Problem& p) {
  const Case& c = p.c;
  const cuda::CudnnAttentionShape shape = shape_of(p);
  auto workspace_bytes = cudnn.prepare(shape);
  EXPECT_TRUE(workspace_bytes.is_ok()) << workspace_bytes.status().to_string();
  if (!workspace_bytes) return {};
  auto workspace = cuda::device_alloc(std::max<size_t>(1, *workspace_bytes), "cuDNN workspace");
  EXPECT_TRUE(workspace.is_ok());
  cuda::DeviceMemory out = poisoned_output(c);
  cuda::CudnnAttentionArgs a;
  a.shape = shape;
  a.q = static_cast<const __nv_bfloat16*>(p.q.get());
  a.k = static_cast<const __nv_bfloat16*>(p.k.get());
  a.v = static_cast<const __nv_bfloat16*>(p.v.get());
  a.out = static_cast<__nv_bfloat16*>(out.get());
  a.scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
  a.workspace = workspace->get();
  a.workspace_bytes = *workspace_bytes;
  const Status status = cudnn.run(a, nullptr);
  EXPECT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return download(out, c);
}

// ‖a − b‖ / ‖b‖, and whether every element of a is finite.
std::pair<double, bool> compare(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  bool finite = a.size() == b.size();
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    finite = finite && std::isfinite(a[i]);
    diff += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    norm += double{b[i]} * b[i];
  }
  return {std::sqrt(diff / norm), finite};
}

class GpuCudnnAttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HIQ_SKIP_OR_FAIL_WITHOUT_GPU();
    auto made = cuda::CudnnAttention::create();
    if (!made && made.status().code() == StatusCode::kUnavailable)
      GTEST_SKIP() << "cuDNN is not usable here: " << made.status().message();
    ASSERT_TRUE(made.is_ok()) << made.status().to_string();
    cudnn_ = std::move(*made);
    int device = 0;
    ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
    ASSERT_EQ(cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  }
  std::unique_ptr<cuda::CudnnAttention> cudnn_;
  int multiprocessors_ = 0;
};

TEST_F(GpuCudnnAttentionTest, MatchesOurKernelOnPromptsAndCachedPrefixes) {
  const std::vector<Case> cases = {
      {128, 128, 32, 8},          // one tile
      {1000, 1000, 32, 8},        // not a multiple of any tile
      {2048, 2048, 32, 8},        // Qwen3-8B's heads at 2K
      {256, 1280, 32, 8, true},   // after a cached prefix: bottom-right causal; Q in QKV rows
      {128, 128, 4, 2},           // few heads, groups of 2
      {256, 1280, 4, 2},          // few heads after a prefix
      {300, 700, 8, 8, false, 64},  // no GQA, head_dim 64
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    const Problem p = make_problem(c, seed++);
    const std::vector<float> ours = run_ours(p, multiprocessors_);
    const std::vector<float> theirs = run_cudnn(*cudnn_, p);
    const auto [error, finite] = compare(theirs, ours);
    auto engine = cudnn_->engine_of(shape_of(p));
    const std::string where = "q_len " + std::to_string(c.q_len) + ", kv_len " + std::to_string(c.kv_len) + ", " +
                              std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) + " heads of " +
                              std::to_string(c.head_dim) + ", cuDNN " + cudnn_->version() + " " +
                              (engine ? *engine : engine.status().to_string());
    EXPECT_TRUE(finite) << "an output element was not written (or is not finite): " << where;
    // Both round P to BF16 before P·V and write BF16: ~0.3 % apart typically,
    // the bound gpu_attention_test.cc holds each kernel to against float64.
    EXPECT_LT(error, 1e-2) << where;
  }
}

TEST_F(GpuCudnnAttentionTest, BuildsAPlanOncePerShape) {
  const Problem p = make_problem({256, 512, 32, 8}, 7);
  const std::vector<float> first = run_cudnn(*cudnn_, p);
  const std::vector<float> second = run_cudnn(*cudnn_, p);
  EXPECT_EQ(cudnn_->stats().plans_built, 1u);
  EXPECT_GE(cudnn_->stats().plan_hits, 1u);
  EXPECT_EQ(first, second) << "the same plan on the same inputs gave another result";
}

TEST_F(GpuCudnnAttentionTest, RefusesAWorkspaceSmallerThanThePlanNeedsAndMisalignedBuffers) {
  const Problem p = make_problem({128, 128, 4, 2}, 8);
  auto bytes = cudnn_->prepare(shape_of(p));
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().to_string();
  cuda::DeviceMemory out = poisoned_output(p.c);
  cuda::CudnnAttentionArgs a;
  a.shape = shape_of(p);
  a.q = static_cast<const __nv_bfloat16*>(p.q.get());
  a.k = static_cast<const __nv_bfloat16*>(p.k.get());
  a.v = static_cast<const __nv_bfloat16*>(p.v.get());
  a.out = static_cast<__nv_bfloat16*>(out.get()) + 1;  // 2 bytes off
  a.scale = 1.f;
  EXPECT_EQ(cudnn_->run(a, nullptr).code(), StatusCode::kInvalidArgument);
  if (*bytes > 0) {
    a.out = static_cast<__nv_bfloat16*>(out.get());
    EXPECT_EQ(cudnn_->run(a, nullptr).code(), StatusCode::kInvalidArgument);
  }
}

TEST(CudnnAttentionShapeTest, RejectsShapesTheBackendDoesNotTake) {
  const cuda::CudnnAttentionShape good{256, 1280, 32, 8, 128, 32 * 128};
  EXPECT_TRUE(cuda::validate_cudnn_attention_shape(good).is_ok());
  auto bad = good;
  bad.kv_len = 100;  // fewer context tokens than new ones
  EXPECT_EQ(cuda::validate_cudnn_attention_shape(bad).code(), StatusCode::kInvalidArgument);
  bad = good;
  bad.kv_heads = 5;  // 32 query heads do not split into 5 groups
  EXPECT_EQ(cuda::validate_cudnn_attention_shape(bad).code(), StatusCode::kInvalidArgument);
  bad = good;
  bad.head_dim = 96;
  bad.q_token_stride = 32 * 96;
  EXPECT_EQ(cuda::validate_cudnn_attention_shape(bad).code(), StatusCode::kInvalidArgument);
  bad = good;
  bad.q_token_stride = 32 * 128 - 8;  // rows overlap
  EXPECT_EQ(cuda::validate_cudnn_attention_shape(bad).code(), StatusCode::kInvalidArgument);
  bad = good;
  bad.q_token_stride = 32 * 128 + 4;  // rows not 16-byte aligned
  EXPECT_EQ(cuda::validate_cudnn_attention_shape(bad).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace hiq
