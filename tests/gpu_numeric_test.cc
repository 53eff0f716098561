// The GPU's conversion intrinsics agree with codec/numeric.h bit for bit: the
// ground on which byte-identical CPU and GPU codecs stand. Skips without a GPU.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "codec/cuda/convert.h"
#include "codec/numeric.h"
#include "cuda/device.h"
#include "gpu_test_policy.h"

namespace hiq {
namespace {

class GpuNumeric : public ::testing::Test {
 protected:
  void SetUp() override {
    HIQ_SKIP_OR_FAIL_WITHOUT_GPU();
  }
};

std::vector<float> interesting_floats() {
  std::vector<float> v;
  std::mt19937 rng(3);
  for (int i = 0; i < 1 << 20; ++i) v.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  for (uint32_t bits = 0x3F800000u; bits < 0x3F800000u + 0x20000u; ++bits) v.push_back(std::bit_cast<float>(bits));
  for (float f : {0.0f, -0.0f, 448.0f, 464.0f, 480.0f, 1e30f, 0x1p-9f, 0x1p-10f, 3 * 0x1p-10f})
    v.push_back(f);
  return v;
}

TEST_F(GpuNumeric, FloatToBf16MatchesHost) {
  const auto in = interesting_floats();
  std::vector<uint16_t> gpu(in.size());
  ASSERT_TRUE(cuda::probe_float_to_bf16(in.data(), gpu.data(), in.size()).is_ok());
  for (size_t i = 0; i < in.size(); ++i) {
    const uint16_t host = numeric::float_to_bf16(in[i]);
    if (std::isnan(in[i])) {
      ASSERT_TRUE(std::isnan(numeric::bf16_to_float(gpu[i]))) << i;
      continue;  // NaN payloads may differ; both are NaN
    }
    ASSERT_EQ(gpu[i], host) << "input bits " << std::hex << std::bit_cast<uint32_t>(in[i]);
  }
}

TEST_F(GpuNumeric, FloatToE4m3MatchesHostOnFiniteInput) {
  auto in = interesting_floats();
  std::erase_if(in, [](float f) { return !std::isfinite(f); });
  std::vector<uint8_t> gpu(in.size());
  ASSERT_TRUE(cuda::probe_float_to_e4m3(in.data(), gpu.data(), in.size()).is_ok());
  for (size_t i = 0; i < in.size(); ++i)
    ASSERT_EQ(gpu[i], numeric::float_to_e4m3(in[i])) << "input " << in[i];
}

TEST_F(GpuNumeric, E4m3ToFloatMatchesHost) {
  std::vector<uint8_t> codes(256);
  for (int i = 0; i < 256; ++i) codes[i] = static_cast<uint8_t>(i);
  std::vector<float> gpu(256);
  ASSERT_TRUE(cuda::probe_e4m3_to_float(codes.data(), gpu.data(), 256).is_ok());
  for (int i = 0; i < 256; ++i) {
    const float host = numeric::e4m3_to_float(codes[i]);
    if (std::isnan(host)) {
      EXPECT_TRUE(std::isnan(gpu[i])) << i;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(gpu[i]), std::bit_cast<uint32_t>(host)) << i;
    }
  }
}

TEST(GpuDevices, QueryReportsUsableDevicesOrAReason) {
  auto gpus = cuda::query_gpus();
  if (!gpus) {
    EXPECT_FALSE(gpus.status().message().empty());
    HIQ_SKIP_OR_FAIL_WITHOUT_GPU();  // fails unless kUnavailable, or when HIQ_REQUIRE_GPU is set
  }
  ASSERT_FALSE(gpus->empty());
  for (const auto& g : *gpus) {
    EXPECT_GT(g.multiprocessors, 0);
    EXPECT_GT(g.global_memory_bytes, 0u);
    EXPECT_GE(g.compute_major, 7);
  }
}

}  // namespace
}  // namespace hiq
