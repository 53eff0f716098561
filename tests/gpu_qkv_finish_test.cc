// The step between the QKV projection and attention (launch_qkv_finish in
// model/cuda/model_kernels.h) against a float64 reference that rounds to
// BF16 where the kernel does: every head_dim the runtime meets, with and
// without the QKV bias and the q/k-norm, tokens with and without an L1 slot,
// on 16-byte aligned buffers (the vector form, 8 pairs a lane) and on
// buffers two bytes off (the scalar form). The two forms add a head's
// squares in different orders, so they agree within the RMSNorm's last
// rounding, not bit for bit. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/buffers.h"
#include "gpu_test_policy.h"
#include "model/cuda/model_kernels.h"

namespace hiq {
namespace {

using bf16 = __nv_bfloat16;

float to_bf16(double x) { return __bfloat162float(__float2bfloat16_rn(static_cast<float>(x))); }

struct Case {
  int head_dim, heads, kv_heads, tokens;
  bool bias, qk_norm;
  int offset;  // elements every device buffer starts past its allocation: 1 forces the scalar form
};

std::string name(const Case& c) {
  return "head_dim " + std::to_string(c.head_dim) + (c.bias ? ", bias" : "") + (c.qk_norm ? ", qk-norm" : "") +
         (c.offset ? ", unaligned" : "");
}

class GpuQkvFinishTest : public ::testing::Test {
 protected:
  void SetUp() override { HIQ_SKIP_OR_FAIL_WITHOUT_GPU(); }

  // `host` into device memory, `offset` elements in.
  template <typename T>
  T* upload(const std::vector<T>& host, int offset) {
    auto memory = cuda::device_alloc((host.size() + offset) * sizeof(T), "test buffer");
    EXPECT_TRUE(memory.is_ok());
    T* p = static_cast<T*>(memory->get()) + offset;
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    buffers_.push_back(std::move(*memory));
    return p;
  }
  template <typename T>
  std::vector<T> download(const T* p, size_t n) {
    std::vector<T> host(n);
    EXPECT_EQ(cudaMemcpy(host.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

  std::vector<cuda::DeviceMemory> buffers_;
};

TEST_F(GpuQkvFinishTest, MatchesARoundedReferenceAtEveryHeadDimInBothForms) {
  const std::vector<Case> cases = {
      {128, 32, 8, 37, false, true, 0}, {128, 32, 8, 37, true, true, 0}, {128, 32, 8, 37, false, true, 1},
      {64, 8, 2, 19, true, true, 0},    {64, 8, 2, 19, true, false, 0},  {16, 4, 2, 9, false, true, 0},
      {32, 6, 3, 9, true, true, 0},     {40, 4, 4, 11, true, true, 0},   {96, 12, 4, 11, false, true, 0},
      {256, 8, 2, 5, true, true, 0},    {256, 8, 2, 5, false, true, 1},  {20, 5, 1, 7, false, false, 0},
      {32, 6, 3, 9, true, true, 1},     {16, 4, 2, 9, true, true, 1},    {96, 12, 4, 11, true, true, 1},
  };
  const float eps = 1e-6f, rope_scale = 1.f;
  for (const Case& c : cases) {
    SCOPED_TRACE(name(c));
    const int d = c.head_dim, half = d / 2, all_heads = c.heads + 2 * c.kv_heads, width = all_heads * d;
    std::mt19937 rng(static_cast<uint32_t>(d * 131 + c.tokens));
    std::normal_distribution<float> normal(0.f, 1.f);
    const auto random = [&](size_t n, float scale) {
      std::vector<bf16> v(n);
      for (auto& e : v) e = __float2bfloat16_rn(scale * normal(rng));
      return v;
    };
    const std::vector<bf16> qkv = random(static_cast<size_t>(c.tokens) * width, 2.f);
    const std::vector<bf16> bias = random(static_cast<size_t>(width), 0.5f);
    const std::vector<bf16> q_norm = random(static_cast<size_t>(d), 1.f), k_norm = random(static_cast<size_t>(d), 1.f);
    std::vector<int32_t> positions(c.tokens);
    std::vector<uint32_t> slots(c.tokens);
    const int kv_rows = c.tokens + 3;  // L1 slots, in a shuffled order; every fifth token none
    std::vector<uint32_t> order(kv_rows);
    std::iota(order.begin(), order.end(), 0u);
    std::shuffle(order.begin(), order.end(), rng);
    for (int t = 0; t < c.tokens; ++t) {
      positions[t] = 977 * t + 5;  // angles far past 2π, as at long contexts
      slots[t] = t % 5 == 4 ? cuda::kNoKvSlot : order[t];
    }
    std::vector<float> inv_freq(half);
    for (int j = 0; j < half; ++j) inv_freq[j] = static_cast<float>(std::pow(1e6, -2.0 * j / d));
    const std::vector<bf16> sentinel(static_cast<size_t>(kv_rows) * c.kv_heads * d, __float2bfloat16_rn(-7.f));

    cuda::QkvArgs a;
    a.qkv = upload(qkv, c.offset);
    a.bias = c.bias ? upload(bias, c.offset) : nullptr;
    a.q_norm = c.qk_norm ? upload(q_norm, c.offset) : nullptr;
    a.k_norm = c.qk_norm ? upload(k_norm, c.offset) : nullptr;
    a.positions = upload(positions, 0);
    a.slots = upload(slots, 0);
    a.k_plane = upload(sentinel, c.offset);
    a.v_plane = upload(sentinel, c.offset);
    a.inv_freq = upload(inv_freq, 0);
    a.rope_scale = rope_scale;
    a.eps = eps;
    a.tokens = c.tokens, a.heads = c.heads, a.kv_heads = c.kv_heads, a.head_dim = d;
    ASSERT_TRUE(cuda::launch_qkv_finish(a, nullptr).is_ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<bf16> q_out = download(a.qkv, qkv.size());
    const std::vector<bf16> k_out = download(a.k_plane, sentinel.size()), v_out = download(a.v_plane, sentinel.size());

    double worst = 0;
    int unexpected = 0;
    for (int t = 0; t < c.tokens; ++t) {
      const bool stored = slots[t] != cuda::kNoKvSlot;
      for (int head = 0; head < all_heads; ++head) {
        const bool is_q = head < c.heads, is_k = !is_q && head < c.heads + c.kv_heads;
        std::vector<double> x(d);
        double squares = 0;
        for (int i = 0; i < d; ++i) {
          x[i] = __bfloat162float(qkv[static_cast<size_t>(t) * width + head * d + i]);
          if (c.bias) x[i] = to_bf16(x[i] + __bfloat162float(bias[head * d + i]));
          squares += x[i] * x[i];
        }
        std::vector<double> want(d);
        if (is_q || is_k) {
          const std::vector<bf16>& norm = is_q ? q_norm : k_norm;
          const double rstd = 1.0 / std::sqrt(squares / d + eps);
          if (c.qk_norm)
            for (int i = 0; i < d; ++i) x[i] = to_bf16(to_bf16(x[i] * rstd) * __bfloat162float(norm[i]));
          for (int j = 0; j < half; ++j) {
            const double theta = static_cast<double>(static_cast<float>(positions[t]) * inv_freq[j]);
            const double cs = to_bf16(std::cos(theta) * rope_scale), sn = to_bf16(std::sin(theta) * rope_scale);
            want[j] = to_bf16(to_bf16(x[j] * cs) + to_bf16(-x[j + half] * sn));
            want[j + half] = to_bf16(to_bf16(x[j + half] * cs) + to_bf16(x[j] * sn));
          }
        } else {
          want = x;
        }
        if (!is_q && !stored) continue;  // checked below: nothing written
        const bf16* got = is_q  ? &q_out[static_cast<size_t>(t) * width + head * d]
                          : is_k ? &k_out[(static_cast<size_t>(slots[t]) * c.kv_heads + head - c.heads) * d]
                                 : &v_out[(static_cast<size_t>(slots[t]) * c.kv_heads + head - c.heads - c.kv_heads) * d];
        for (int i = 0; i < d; ++i) {
          const double diff = std::abs(__bfloat162float(got[i]) - want[i]);
          // Two BF16 steps of the largest value (|x| < 16 here): the rotation
          // sums two rounded products, and cos, sin or rstd may round apart.
          worst = std::max(worst, diff);
          if (diff > 0.02 * std::max(1.0, std::abs(want[i])) + 1e-3) ++unexpected;
        }
      }
    }
    EXPECT_EQ(unexpected, 0) << "largest difference " << worst;
    // Rows of L1 that no stored token owns keep their sentinel.
    std::vector<bool> owned(kv_rows, false);
    for (int t = 0; t < c.tokens; ++t)
      if (slots[t] != cuda::kNoKvSlot) owned[slots[t]] = true;
    for (int row = 0; row < kv_rows; ++row) {
      if (owned[row]) continue;
      for (int i = 0; i < c.kv_heads * d; ++i) {
        ASSERT_EQ(__bfloat162float(k_out[static_cast<size_t>(row) * c.kv_heads * d + i]), -7.f) << "K row " << row;
        ASSERT_EQ(__bfloat162float(v_out[static_cast<size_t>(row) * c.kv_heads * d + i]), -7.f) << "V row " << row;
      }
    }
  }
}

}  // namespace
}  // namespace hiq
