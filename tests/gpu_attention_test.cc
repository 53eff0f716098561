// The CUDA attention kernels against a float64 reference on the CPU, on
// random data: fresh prompts and prompts after a cached prefix, lengths that
// are and are not multiples of the tiles, several sequences per batch, GQA
// groups of 1, 4 and 8, and context slots scattered over the pool. Every
// output element is poisoned first, so one the kernel skips is an error. The
// Hopper kernel, in both its forms, runs where the GPU is compute capability
// 9.0 (it skips elsewhere); the portable one runs on every GPU, its decode
// form (a few rows per KV head, the warps splitting each tile) at every head
// dim, with and without context splits. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/buffers.h"
#include "gpu_test_policy.h"
#include "model/cuda/attention.h"

namespace hiq {
namespace {

using cuda::AttentionKernel;

struct Shape {
  int heads, kv_heads;
  std::vector<std::pair<int, int>> sequences;  // (new tokens, cached prefix)
  int head_dim = 128;
};

struct Problem {
  int heads = 0, kv_heads = 0, head_dim = 128, tokens = 0, pool = 0;
  std::vector<cuda::AttentionSequence> sequences;
  std::vector<uint32_t> slots;                  // every sequence's context, in order
  std::vector<__nv_bfloat16> q, k, v;           // q: [token][heads][d]; k, v: [slot][kv_heads][d]
};

Problem make_problem(const Shape& shape, uint32_t seed) {
  Problem p;
  p.heads = shape.heads;
  p.kv_heads = shape.kv_heads;
  p.head_dim = shape.head_dim;
  int context = 0;
  for (auto [q_len, prefix] : shape.sequences) {
    p.sequences.push_back({p.tokens, q_len, prefix + q_len, context});
    p.tokens += q_len;
    context += prefix + q_len;
  }
  // A pool with free slots in it, handed out in a random order.
  p.pool = context + 97;
  std::vector<uint32_t> all(static_cast<size_t>(p.pool));
  std::iota(all.begin(), all.end(), 0u);
  std::mt19937 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  p.slots.assign(all.begin(), all.begin() + context);
  std::normal_distribution<float> normal(0.f, 1.f);
  const auto fill = [&](std::vector<__nv_bfloat16>& x, size_t n, float scale) {
    x.resize(n);
    for (auto& e : x) e = __float2bfloat16_rn(scale * normal(rng));
  };
  fill(p.q, static_cast<size_t>(p.tokens) * p.heads * p.head_dim, 1.5f);  // peaked enough softmaxes
  fill(p.k, static_cast<size_t>(p.pool) * p.kv_heads * p.head_dim, 1.5f);
  fill(p.v, static_cast<size_t>(p.pool) * p.kv_heads * p.head_dim, 1.f);
  return p;
}

std::vector<double> reference(const Problem& p) {
  const int d = p.head_dim, group = p.heads / p.kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> out(static_cast<size_t>(p.tokens) * p.heads * d);
  for (const auto& s : p.sequences)
    for (int i = 0; i < s.q_len; ++i)
      for (int h = 0; h < p.heads; ++h) {
        const int position = s.kv_len - s.q_len + i, kv_head = h / group;
        const __nv_bfloat16* q = &p.q[(static_cast<size_t>(s.q_start + i) * p.heads + h) * d];
        std::vector<double> score(static_cast<size_t>(position) + 1);
        double top = -INFINITY;
        for (int t = 0; t <= position; ++t) {
          const __nv_bfloat16* k = &p.k[(static_cast<size_t>(p.slots[s.slot_start + t]) * p.kv_heads + kv_head) * d];
          double dot = 0;
          for (int e = 0; e < d; ++e) dot += double{__bfloat162float(q[e])} * __bfloat162float(k[e]);
          score[t] = dot * scale;
          top = std::max(top, score[t]);
        }
        double sum = 0;
        for (double& x : score) sum += (x = std::exp(x - top));
        double* o = &out[(static_cast<size_t>(s.q_start + i) * p.heads + h) * d];
        for (int t = 0; t <= position; ++t) {
          const __nv_bfloat16* v = &p.v[(static_cast<size_t>(p.slots[s.slot_start + t]) * p.kv_heads + kv_head) * d];
          for (int e = 0; e < d; ++e) o[e] += score[t] / sum * __bfloat162float(v[e]);
        }
      }
  return out;
}

template <typename T>
cuda::DeviceMemory upload(const std::vector<T>& host) {
  auto memory = cuda::device_alloc(std::max<size_t>(1, host.size() * sizeof(T)), "test buffer");
  EXPECT_TRUE(memory.is_ok()) << memory.status().to_string();
  EXPECT_EQ(cudaMemcpy(memory->get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return std::move(*memory);
}

// A problem on the device and the args of a launch of `kernel` over it. A
// `bucket_kv_len` sizes the launch (grid, splits) for that context instead
// of the longest one, as a decode graph does for its bucket. With
// `combine_in_kernel` the launch brings split counters, zeroed, so that the
// decode form merges its split contexts in the attention kernel itself.
struct Launch {
  cuda::DeviceMemory q, k, v, slots, sequences, out, workspace, staging, counters;
  cuda::AttentionArgs args;
  size_t out_elements = 0;
};

Launch prepare_launch(const Problem& p, AttentionKernel kernel, int multiprocessors, int bucket_kv_len = 0,
                      bool combine_in_kernel = false) {
  Launch l;
  l.q = upload(p.q);
  l.k = upload(p.k);
  l.v = upload(p.v);
  l.slots = upload(p.slots);
  l.sequences = upload(p.sequences);
  l.out_elements = static_cast<size_t>(p.tokens) * p.heads * p.head_dim;
  auto out = cuda::device_alloc(l.out_elements * 2, "out");
  EXPECT_TRUE(out.is_ok());
  l.out = std::move(*out);
  cuda::AttentionArgs& a = l.args;
  a.q = static_cast<const __nv_bfloat16*>(l.q.get());
  a.q_token_stride = static_cast<int64_t>(p.heads) * p.head_dim;
  a.out = static_cast<__nv_bfloat16*>(l.out.get());
  a.k_plane = static_cast<const __nv_bfloat16*>(l.k.get());
  a.v_plane = static_cast<const __nv_bfloat16*>(l.v.get());
  a.slots = static_cast<const uint32_t*>(l.slots.get());
  a.sequences = static_cast<const cuda::AttentionSequence*>(l.sequences.get());
  a.num_sequences = static_cast<int>(p.sequences.size());
  for (const auto& s : p.sequences) {
    a.max_q_len = std::max(a.max_q_len, s.q_len);
    a.max_kv_len = std::max(a.max_kv_len, s.kv_len);
  }
  a.max_kv_len = std::max(a.max_kv_len, bucket_kv_len);
  a.num_tokens = p.tokens;
  a.heads = p.heads;
  a.kv_heads = p.kv_heads;
  a.head_dim = p.head_dim;
  a.scale = 1.f / std::sqrt(static_cast<float>(p.head_dim));
  a.kernel = kernel;
  a.splits = cuda::attention_splits(a, multiprocessors);
  auto workspace = cuda::device_alloc(
      std::max<size_t>(1, cuda::attention_workspace_floats(a.splits, p.tokens, p.heads, p.head_dim)) * sizeof(float),
      "workspace");
  EXPECT_TRUE(workspace.is_ok());
  l.workspace = std::move(*workspace);
  a.workspace = static_cast<float*>(l.workspace.get());
  if (combine_in_kernel) {
    const size_t counter_bytes = static_cast<size_t>(a.num_sequences) * a.kv_heads * sizeof(unsigned int);
    auto counters = cuda::device_alloc(counter_bytes, "split counters");
    EXPECT_TRUE(counters.is_ok());
    l.counters = std::move(*counters);
    EXPECT_EQ(cudaMemset(l.counters.get(), 0, counter_bytes), cudaSuccess);
    a.split_counters = static_cast<unsigned int*>(l.counters.get());
  }
  a.context_entries = static_cast<int>(p.slots.size());
  // Poisoned: a staged row the kernel reads before its gather wrote it shows as NaN.
  const size_t staging_bytes = std::max<size_t>(1, cuda::attention_staging_bytes(a));
  auto staging = cuda::device_alloc(staging_bytes, "staging");
  EXPECT_TRUE(staging.is_ok());
  l.staging = std::move(*staging);
  EXPECT_EQ(cudaMemset(l.staging.get(), 0xff, staging_bytes), cudaSuccess);
  a.staging = l.staging.get();
  return l;
}

// Launches `l` on an output poisoned with NaN; the output's bits.
std::vector<uint16_t> launch_bits(const Launch& l) {
  EXPECT_EQ(cudaMemset(l.out.get(), 0xff, l.out_elements * 2), cudaSuccess);
  const Status status = cuda::launch_attention(l.args, nullptr);
  EXPECT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint16_t> bits(l.out_elements);
  EXPECT_EQ(cudaMemcpy(bits.data(), l.out.get(), l.out_elements * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  return bits;
}

std::vector<float> as_floats(const std::vector<uint16_t>& bits) {
  std::vector<float> result(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    const uint32_t widened = uint32_t{bits[i]} << 16;  // BF16 is a float's top half
    std::memcpy(&result[i], &widened, sizeof(float));
  }
  return result;
}

// Runs `kernel` on the problem (prepare_launch() says how); the output as floats.
std::vector<float> run(const Problem& p, AttentionKernel kernel, int multiprocessors, int* splits_used,
                       int bucket_kv_len = 0) {
  const Launch l = prepare_launch(p, kernel, multiprocessors, bucket_kv_len);
  *splits_used = l.args.splits;
  return as_floats(launch_bits(l));
}

// ‖out − ref‖ / ‖ref‖, and whether every element is finite.
std::pair<double, bool> compare(const std::vector<float>& out, const std::vector<double>& ref) {
  double diff = 0, norm = 0;
  bool finite = true;
  for (size_t i = 0; i < ref.size(); ++i) {
    finite = finite && std::isfinite(out[i]);
    diff += (out[i] - ref[i]) * (out[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return {std::sqrt(diff / norm), finite};
}

bool device_is_sm90() {
  int device = 0, major = 0, minor = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess && major == 9 &&
         minor == 0;
}

class GpuAttentionTest : public ::testing::TestWithParam<AttentionKernel> {
 protected:
  void SetUp() override {
    HIQ_SKIP_OR_FAIL_WITHOUT_GPU();
    if (GetParam() != AttentionKernel::kPortable && !device_is_sm90())
      GTEST_SKIP() << "the sm90 kernel runs on compute capability 9.0 only";
    int device = 0;
    ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
    ASSERT_EQ(cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  }
  int multiprocessors_ = 0;
};

TEST_P(GpuAttentionTest, MatchesAFloat64ReferenceOnPrefillsAndCachedPrefixes) {
  const std::vector<Shape> shapes = {
      {32, 8, {{300, 0}}},                      // fresh prompt, not a multiple of any tile
      {32, 8, {{256, 0}}},                      // exactly two 128-token tiles
      {32, 8, {{200, 1000}}},                   // after a cached prefix
      {32, 8, {{77, 0}, {130, 513}, {1, 40}}},  // a batch: lengths, prefixes and a decode row differ
      {8, 8, {{333, 64}}},                      // no GQA: one query head per KV head
      {64, 8, {{129, 0}}},                      // groups of 8
  };
  uint32_t seed = 1;
  for (const Shape& shape : shapes) {
    const Problem p = make_problem(shape, seed++);
    int splits = 0;
    const std::vector<float> out = run(p, GetParam(), multiprocessors_, &splits);
    const auto [error, finite] = compare(out, reference(p));
    EXPECT_TRUE(finite) << "an output element was not written (or is not finite), shape " << seed - 1;
    // BF16 inputs, P rounded to BF16 before P·V, BF16 output: ~0.3 % typically.
    EXPECT_LT(error, 1e-2) << "shape " << seed - 1 << ", splits " << splits;
    if (GetParam() != AttentionKernel::kPortable) {
      EXPECT_EQ(splits, 1);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, GpuAttentionTest,
                         ::testing::Values(AttentionKernel::kPortable, AttentionKernel::kSm90,
                                           AttentionKernel::kSm90Staged),
                         [](const ::testing::TestParamInfo<AttentionKernel>& kernel) {
                           switch (kernel.param) {
                             case AttentionKernel::kSm90:
                               return "Sm90";
                             case AttentionKernel::kSm90Staged:
                               return "Sm90Staged";
                             default:
                               return "Portable";
                           }
                         });

// Decode batches: when a sequence's rows for one KV head (q_len × group) fit
// one warp's 16, the portable kernel's warps split each tile's tokens and
// merge their softmax states; with the context split across blocks as well
// (the H200's 132 multiprocessors) and not (one).
TEST(GpuAttentionDecodeTest, FewRowsPerKvHeadMatchAFloat64ReferenceSplitOrNot) {
  HIQ_SKIP_OR_FAIL_WITHOUT_GPU();
  const std::vector<Shape> shapes = {
      {32, 8, {{1, 0}}},                                           // a one-token context
      {32, 8, {{1, 2047}}},                                        // Qwen3-8B decoding at 2K
      {32, 8, {{1, 40}, {1, 63}, {1, 64}, {1, 700}, {1, 4999}}},  // a batch: tile edges, lengths differ
      {32, 8, {{4, 300}}},                                         // 4 new tokens (16 rows): causal in a tile
      {64, 8, {{2, 129}}},                                         // groups of 8, 16 rows
      {8, 8, {{3, 77}}, 64},                                       // no GQA, head_dim 64
      {8, 8, {{1, 3000}}, 64},                                     // head_dim 64, long enough to split
      {16, 2, {{1, 1000}}, 256},                                   // head_dim 256, split
      {16, 2, {{1, 100}}, 256},                                    // head_dim 256, too short to split
      {16, 1, {{1, 300}}, 16},                                     // a group of 16, head_dim 16
      {32, 8, {{1, 500}, {3, 200}}, 32},                           // 4 and 12 rows in one batch, head_dim 32
  };
  bool split_seen = false, whole_seen = false;
  for (const int multiprocessors : {132, 1}) {
    uint32_t seed = 100;
    for (const Shape& shape : shapes) {
      const Problem p = make_problem(shape, seed++);
      cuda::AttentionArgs form;
      form.heads = p.heads;
      form.kv_heads = p.kv_heads;
      for (const auto& sequence : p.sequences) form.max_q_len = std::max(form.max_q_len, sequence.q_len);
      ASSERT_TRUE(cuda::attention_decode_form(form)) << "shape " << seed - 1 << " would not take the decode form";
      int longest = 0;
      for (const auto& sequence : p.sequences) longest = std::max(longest, sequence.kv_len);
      // Sized for the longest context, and for a graph's bucket of twice it
      // (every sequence's context then spread over more splits).
      for (const int bucket : {0, 2 * longest}) {
        int splits = 0;
        const std::vector<float> out = run(p, AttentionKernel::kPortable, multiprocessors, &splits, bucket);
        const auto [error, finite] = compare(out, reference(p));
        EXPECT_TRUE(finite) << "shape " << seed - 1 << ", splits " << splits << ", bucket " << bucket;
        EXPECT_LT(error, 1e-2) << "shape " << seed - 1 << ", splits " << splits << ", bucket " << bucket;
        split_seen = split_seen || splits > 1;
        whole_seen = whole_seen || (splits == 1 && p.sequences.front().kv_len >= 1000);
      }
    }
  }
  EXPECT_TRUE(whole_seen) << "no long context ran in one block: the in-block merge alone went untested";
  EXPECT_TRUE(split_seen) << "no shape split its context: the combine step went untested";
}

// Split decode contexts merged in the attention kernel, by the last split
// block of each (sequence, KV head), give the combine kernel's very bits,
// and again on a second launch, which finds the counters the first left at
// zero (as a graph replay or the next layer does).
TEST(GpuAttentionDecodeTest, InKernelCombineGivesTheCombineKernelsBitsLaunchAfterLaunch) {
  HIQ_SKIP_OR_FAIL_WITHOUT_GPU();
  // `sequences` decode rows, each with a context of `context` tokens.
  const auto decode = [](int sequences, int context) {
    return std::vector<std::pair<int, int>>(static_cast<size_t>(sequences), {1, context - 1});
  };
  const std::vector<Shape> shapes = {
      {32, 8, decode(1, 2048)},                             // Qwen3-8B, batch 1
      {32, 8, decode(1, 5000)},
      {32, 8, decode(8, 2048)},                             // batch 8
      {32, 8, decode(8, 5000)},
      {32, 8, {{1, 40}, {1, 700}, {4, 1996}, {1, 4999}}},  // lengths differ; 16 rows in one
      {32, 8, decode(8, 2048), 64},                         // head_dim 64
      {8, 8, decode(1, 3000), 64},                          // head_dim 64, no GQA
  };
  constexpr int kMultiprocessors = 132;  // the H200's
  uint32_t seed = 300;
  for (const Shape& shape : shapes) {
    const Problem p = make_problem(shape, seed++);
    const std::vector<double> want = reference(p);
    int longest = 0;
    for (const auto& sequence : p.sequences) longest = std::max(longest, sequence.kv_len);
    // Sized for the longest context, and for a graph's bucket of twice it
    // (the shorter contexts then leave some split blocks nothing to read).
    for (const int bucket : {0, 2 * longest}) {
      const std::string where = "shape " + std::to_string(seed - 1) + ", bucket " + std::to_string(bucket);
      const Launch separate = prepare_launch(p, AttentionKernel::kPortable, kMultiprocessors, bucket);
      const Launch fused = prepare_launch(p, AttentionKernel::kPortable, kMultiprocessors, bucket,
                                          /*combine_in_kernel=*/true);
      ASSERT_GT(separate.args.splits, 1) << where << ": the context must split for a combine to happen";
      ASSERT_EQ(fused.args.splits, separate.args.splits) << where;
      ASSERT_FALSE(cuda::attention_combines_in_kernel(separate.args)) << where;
      ASSERT_TRUE(cuda::attention_combines_in_kernel(fused.args)) << where;

      const std::vector<uint16_t> expected = launch_bits(separate);
      const size_t bytes = expected.size() * sizeof(uint16_t);
      EXPECT_EQ(std::memcmp(launch_bits(separate).data(), expected.data(), bytes), 0)
          << where << ": the combine kernel gave other bits the second time";
      for (int launch = 1; launch <= 2; ++launch) {
        const std::vector<uint16_t> bits = launch_bits(fused);
        ASSERT_EQ(bits.size(), expected.size());
        size_t differing = 0;
        for (size_t i = 0; i < bits.size(); ++i) differing += bits[i] != expected[i] ? 1 : 0;
        EXPECT_EQ(std::memcmp(bits.data(), expected.data(), bytes), 0)
            << where << ", launch " << launch << ": " << differing << " of " << bits.size()
            << " elements differ from the combine kernel's";
        const auto [error, finite] = compare(as_floats(bits), want);
        EXPECT_TRUE(finite) << where << ", launch " << launch;
        EXPECT_LT(error, 1e-2) << where << ", launch " << launch << ", splits " << fused.args.splits;
      }
      // Every launch leaves its counters as it found them: zero.
      std::vector<unsigned int> counters(static_cast<size_t>(fused.args.num_sequences) * fused.args.kv_heads);
      ASSERT_EQ(cudaMemcpy(counters.data(), fused.counters.get(), counters.size() * sizeof(unsigned int),
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
      EXPECT_EQ(std::count(counters.begin(), counters.end(), 0u), static_cast<long>(counters.size())) << where;
    }
  }
}

TEST(GpuAttentionChoiceTest, PicksTheSm90KernelOnlyForPrefillsThatFillTheGpu) {
  HIQ_SKIP_OR_FAIL_WITHOUT_GPU();
  cuda::AttentionArgs a;
  a.heads = 32;
  a.kv_heads = 8;
  a.head_dim = 128;
  a.num_sequences = 1;
  a.max_q_len = 1;  // decode: 4 rows per KV head
  a.max_kv_len = 4096;
  EXPECT_EQ(cuda::attention_kernel_for(a, 132), AttentionKernel::kPortable);
  EXPECT_TRUE(cuda::attention_decode_form(a));
  a.max_q_len = 4;  // 16 rows: still one warp's
  EXPECT_TRUE(cuda::attention_decode_form(a));
  a.max_q_len = 5;  // 20 rows: the blocks of 64 or 128
  EXPECT_FALSE(cuda::attention_decode_form(a));
  a.max_q_len = 1;
  a.num_sequences = 64;  // a decode batch whose KV heads alone would fill the GPU: still the decode form
  EXPECT_EQ(cuda::attention_kernel_for(a, 132), AttentionKernel::kPortable);
  a.num_sequences = 1;
  a.max_q_len = 4096;  // prefill
  EXPECT_EQ(cuda::attention_kernel_for(a, 132),
            device_is_sm90() ? AttentionKernel::kSm90 : AttentionKernel::kPortable);
  a.head_dim = 64;  // the sm90 kernel is built for 128 only
  EXPECT_EQ(cuda::attention_kernel_for(a, 132), AttentionKernel::kPortable);
}

}  // namespace
}  // namespace hiq
