// The skinny GEMM of decode steps (model/cuda/skinny_gemm.h) against a
// float64 reference on the CPU and against cuBLAS through Gemms: every row
// count it takes, column counts that are and are not multiples of its
// 16-column blocks, the model's reduction lengths, BF16 and FP32 outputs.
// Its results are the same bits on a rerun and whichever batch a row comes
// in. Its fused forms (a normalised input, a residual add, the SiLU gate)
// give the bits of the separate kernels they replace. The algorithms Gemms
// lists for the benchmarks each compute the product. Skipped without a GPU.
// The Hopper prefill kernel's tests are at the end.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "cuda/buffers.h"
#include "gpu_test_policy.h"
#include "model/cuda/gemm.h"
#include "model/cuda/gemm_sm90.h"
#include "model/cuda/model_kernels.h"
#include "model/cuda/skinny_gemm.h"

namespace hiq {
namespace {

using bf16 = __nv_bfloat16;

std::vector<bf16> random_bf16(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<bf16> v(n);
  for (auto& e : v) e = __float2bfloat16_rn(normal(rng));
  return v;
}

cuda::DeviceMemory upload(const std::vector<bf16>& host) {
  auto memory = cuda::device_alloc(host.size() * sizeof(bf16), "test buffer");
  EXPECT_TRUE(memory.is_ok());
  EXPECT_EQ(cudaMemcpy(memory->get(), host.data(), host.size() * sizeof(bf16), cudaMemcpyHostToDevice), cudaSuccess);
  return std::move(*memory);
}

// y as floats, from BF16 or FP32 device memory.
std::vector<float> download(const void* y, size_t n, cudaDataType_t type) {
  std::vector<float> out(n);
  if (type == CUDA_R_32F) {
    EXPECT_EQ(cudaMemcpy(out.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  } else {
    std::vector<bf16> host(n);
    EXPECT_EQ(cudaMemcpy(host.data(), y, n * sizeof(bf16), cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < n; ++i) out[i] = __bfloat162float(host[i]);
  }
  return out;
}

struct Product {
  int m, n, k;
  std::vector<bf16> x, w;
};

std::vector<double> reference(const Product& p) {
  std::vector<double> y(static_cast<size_t>(p.m) * p.n);
  for (int r = 0; r < p.m; ++r)
    for (int c = 0; c < p.n; ++c) {
      double sum = 0;
      for (int i = 0; i < p.k; ++i)
        sum += double{__bfloat162float(p.x[static_cast<size_t>(r) * p.k + i])} *
               __bfloat162float(p.w[static_cast<size_t>(c) * p.k + i]);
      y[static_cast<size_t>(r) * p.n + c] = sum;
    }
  return y;
}

// Runs the skinny kernel on rows [first, first + m) of p.x.
std::vector<float> skinny(const Product& p, int first, int m, cudaDataType_t type) {
  const std::vector<bf16> rows(p.x.begin() + static_cast<ptrdiff_t>(first) * p.k,
                               p.x.begin() + static_cast<ptrdiff_t>(first + m) * p.k);
  cuda::DeviceMemory x = upload(rows), w = upload(p.w);
  const size_t elements = static_cast<size_t>(m) * p.n, bytes = elements * (type == CUDA_R_32F ? 4 : 2);
  auto y = cuda::device_alloc(bytes, "y");
  EXPECT_TRUE(y.is_ok());
  EXPECT_EQ(cudaMemset(y->get(), 0xff, bytes), cudaSuccess);  // NaN: an element not written shows
  const Status status = cuda::launch_skinny_gemm(static_cast<const bf16*>(x.get()), m,
                                                 static_cast<const bf16*>(w.get()), p.n, p.k, y->get(), type, nullptr);
  EXPECT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return download(y->get(), elements, type);
}

class GpuSkinnyGemmTest : public ::testing::Test {
 protected:
  void SetUp() override { HIQ_SKIP_OR_FAIL_WITHOUT_GPU(); }
};

TEST_F(GpuSkinnyGemmTest, MatchesAFloat64ReferenceAtEveryRowCount) {
  uint32_t seed = 1;
  for (auto [n, k] : std::vector<std::pair<int, int>>{{48, 256}, {1000, 4096}, {77, 12288}, {16, 32}}) {
    for (int m : {1, 2, 7, 8, 9, 17, 24, 31, 32}) {
      const Product p{m, n, k, random_bf16(static_cast<size_t>(m) * k, seed),
                      random_bf16(static_cast<size_t>(n) * k, seed + 1)};
      seed += 2;
      const std::vector<double> want = reference(p);
      for (cudaDataType_t type : {CUDA_R_16BF, CUDA_R_32F}) {
        const std::vector<float> got = skinny(p, 0, m, type);
        // Products of √k scale; FP32 sums, then one rounding to BF16 (2⁻⁸ relative) or none.
        const double tolerance = (type == CUDA_R_32F ? 1e-5 : 8e-3) * std::sqrt(static_cast<double>(k));
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(got[i], want[i], tolerance + 4e-3 * std::fabs(want[i]))
              << "m " << m << " n " << n << " k " << k << " element " << i << (type == CUDA_R_32F ? " fp32" : " bf16");
      }
    }
  }
}

TEST_F(GpuSkinnyGemmTest, SameBitsOnARerunAndInAnyBatch) {
  const int n = 200, k = 4096, m = 32;
  const Product p{m, n, k, random_bf16(static_cast<size_t>(m) * k, 7), random_bf16(static_cast<size_t>(n) * k, 8)};
  const std::vector<float> batch = skinny(p, 0, m, CUDA_R_32F);
  EXPECT_EQ(batch, skinny(p, 0, m, CUDA_R_32F));
  for (int first : {0, 5, 31}) {
    const std::vector<float> alone = skinny(p, first, 1, CUDA_R_32F);
    for (int c = 0; c < n; ++c)
      ASSERT_EQ(alone[static_cast<size_t>(c)], batch[static_cast<size_t>(first) * n + c]) << "row " << first;
  }
}

TEST_F(GpuSkinnyGemmTest, GemmsRoutesDecodeRowsToItAndAgreesWithCublas) {
  const int n = 512, k = 1024;
  auto workspace = cuda::device_alloc(size_t{32} << 20, "workspace");
  ASSERT_TRUE(workspace.is_ok());
  auto gemms = cuda::Gemms::create(nullptr, workspace->get(), size_t{32} << 20);
  ASSERT_TRUE(gemms.is_ok()) << gemms.status().to_string();
  for (int m : {1, 8, 32, 33}) {  // 33: past the skinny kernel, cuBLAS either way
    const Product p{m, n, k, random_bf16(static_cast<size_t>(m) * k, 11), random_bf16(static_cast<size_t>(n) * k, 12)};
    cuda::DeviceMemory x = upload(p.x), w = upload(p.w);
    auto y = cuda::device_alloc(static_cast<size_t>(m) * n * sizeof(float), "y");
    ASSERT_TRUE(y.is_ok());
    std::vector<float> results[2];
    for (int cublas : {0, 1}) {
      gemms->set_skinny(cublas ? cuda::Gemms::Skinny::kNever : cuda::Gemms::Skinny::kWhereverPossible);
      ASSERT_TRUE(
          gemms
              ->run(static_cast<const bf16*>(x.get()), m, static_cast<const bf16*>(w.get()), n, k, y->get(), CUDA_R_32F)
              .is_ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      results[cublas] = download(y->get(), static_cast<size_t>(m) * n, CUDA_R_32F);
    }
    for (size_t i = 0; i < results[0].size(); ++i)
      ASSERT_NEAR(results[0][i], results[1][i], 1e-4 * std::sqrt(static_cast<double>(k))) << "m " << m;
  }
}

// The bits of a BF16 device buffer.
std::vector<uint16_t> bits_of(const void* p, size_t n) {
  std::vector<uint16_t> out(n);
  EXPECT_EQ(cudaMemcpy(out.data(), p, n * sizeof(uint16_t), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

const bf16* as_bf16(const cuda::DeviceMemory& m) { return static_cast<const bf16*>(m.get()); }
bf16* as_bf16(cuda::DeviceMemory& m) { return static_cast<bf16*>(m.get()); }

cuda::DeviceMemory zeros(size_t n) {
  auto m = cuda::device_alloc(n * sizeof(bf16), "buffer");
  EXPECT_TRUE(m.is_ok());
  EXPECT_EQ(cudaMemset(m->get(), 0, n * sizeof(bf16)), cudaSuccess);
  return std::move(*m);
}

TEST_F(GpuSkinnyGemmTest, ANormalisedInputGivesTheBitsOfTheNormKernelThenTheProduct) {
  const float eps = 1e-6f;
  uint32_t seed = 100;
  // Rows of up to 8,192 the norm kernel holds in registers; the last shape's
  // 12,288 it reads twice (and x of 8 such rows is too large to stage).
  struct Shape {
    int n, k;
    std::vector<int> ms;
  };
  for (const auto& [n, k, ms] : std::vector<Shape>{{96, 256, {1, 3, 8}}, {200, 4096, {1, 3, 8}}, {40, 5120, {1, 3, 8}},
                                                   {40, 12288, {1, 3}}}) {
    for (int m : ms) {
      SCOPED_TRACE(::testing::Message() << "m " << m << " n " << n << " k " << k);
      const auto rows = static_cast<size_t>(m) * k;
      cuda::DeviceMemory x = upload(random_bf16(rows, seed)),
                         w = upload(random_bf16(static_cast<size_t>(n) * k, seed + 1));
      cuda::DeviceMemory norm = upload(random_bf16(static_cast<size_t>(k), seed + 2));
      seed += 3;
      cuda::DeviceMemory normed = zeros(rows), separate = zeros(static_cast<size_t>(m) * n),
                         fused = zeros(static_cast<size_t>(m) * n);
      ASSERT_TRUE(
          cuda::launch_add_rms_norm(as_bf16(x), nullptr, as_bf16(norm), m, k, eps, as_bf16(normed), nullptr).is_ok());
      ASSERT_TRUE(
          cuda::launch_skinny_gemm(as_bf16(normed), m, as_bf16(w), n, k, separate.get(), CUDA_R_16BF, nullptr).is_ok());
      cuda::SkinnyFusion fusion;
      fusion.norm_weight = as_bf16(norm);
      fusion.norm_eps = eps;
      const Status status =
          cuda::launch_skinny_gemm(as_bf16(x), m, as_bf16(w), n, k, fused.get(), CUDA_R_16BF, nullptr, fusion);
      ASSERT_TRUE(status.is_ok()) << status.to_string();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(bits_of(fused.get(), static_cast<size_t>(m) * n), bits_of(separate.get(), static_cast<size_t>(m) * n));
    }
  }
}

TEST_F(GpuSkinnyGemmTest, AResidualAddGivesTheBitsOfTheAddKernel) {
  uint32_t seed = 200;
  // n = 8,200: rows wider than the 8,192 the norm kernel holds in registers.
  for (auto [n, k] : std::vector<std::pair<int, int>>{{256, 1024}, {4096, 12288}, {100, 64}, {8200, 64}}) {
    for (int m : {1, 4, 8, 20}) {
      SCOPED_TRACE(::testing::Message() << "m " << m << " n " << n << " k " << k);
      const std::vector<bf16> residual = random_bf16(static_cast<size_t>(m) * n, seed);
      cuda::DeviceMemory x = upload(random_bf16(static_cast<size_t>(m) * k, seed + 1)),
                         w = upload(random_bf16(static_cast<size_t>(n) * k, seed + 2));
      seed += 3;
      cuda::DeviceMemory separate = upload(residual), fused = upload(residual), delta = zeros(residual.size()),
                         normed = zeros(residual.size()), norm = upload(random_bf16(static_cast<size_t>(n), seed));
      ASSERT_TRUE(cuda::launch_skinny_gemm(as_bf16(x), m, as_bf16(w), n, k, delta.get(), CUDA_R_16BF, nullptr).is_ok());
      ASSERT_TRUE(cuda::launch_add_rms_norm(as_bf16(separate), as_bf16(delta), as_bf16(norm), m, n, 1e-6f,
                                            as_bf16(normed), nullptr)
                      .is_ok());
      cuda::SkinnyFusion fusion;
      fusion.add_to_y = true;
      const Status status =
          cuda::launch_skinny_gemm(as_bf16(x), m, as_bf16(w), n, k, fused.get(), CUDA_R_16BF, nullptr, fusion);
      ASSERT_TRUE(status.is_ok()) << status.to_string();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(bits_of(fused.get(), residual.size()), bits_of(separate.get(), residual.size()));
    }
  }
}

TEST_F(GpuSkinnyGemmTest, TheSiluGateGivesTheBitsOfTheGateKernel) {
  uint32_t seed = 300;
  for (auto [n, k] : std::vector<std::pair<int, int>>{{512, 256}, {12288, 4096}, {44, 96}}) {
    for (int m : {1, 6, 8, 17}) {
      SCOPED_TRACE(::testing::Message() << "m " << m << " n " << n << " k " << k);
      cuda::DeviceMemory x = upload(random_bf16(static_cast<size_t>(m) * k, seed)),
                         w = upload(random_bf16(2 * static_cast<size_t>(n) * k, seed + 1));  // gate rows, then up rows
      seed += 2;
      const size_t outputs = static_cast<size_t>(m) * n;
      cuda::DeviceMemory gate_up = zeros(2 * outputs), separate = zeros(outputs), fused = zeros(outputs);
      ASSERT_TRUE(
          cuda::launch_skinny_gemm(as_bf16(x), m, as_bf16(w), 2 * n, k, gate_up.get(), CUDA_R_16BF, nullptr).is_ok());
      ASSERT_TRUE(cuda::launch_silu_mul(as_bf16(gate_up), m, n, as_bf16(separate), nullptr).is_ok());
      cuda::SkinnyFusion fusion;
      fusion.silu_gate = true;
      const Status status =
          cuda::launch_skinny_gemm(as_bf16(x), m, as_bf16(w), n, k, fused.get(), CUDA_R_16BF, nullptr, fusion);
      ASSERT_TRUE(status.is_ok()) << status.to_string();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(bits_of(fused.get(), outputs), bits_of(separate.get(), outputs));
    }
  }
}

TEST_F(GpuSkinnyGemmTest, RefusesWhatItCannotTake) {
  auto memory = cuda::device_alloc(1 << 20, "buffer");
  ASSERT_TRUE(memory.is_ok());
  const auto* base = static_cast<const std::byte*>(memory->get());
  EXPECT_TRUE(cuda::skinny_gemm_supports(base, 32, base, 64, base, CUDA_R_16BF));
  EXPECT_FALSE(cuda::skinny_gemm_supports(base, 33, base, 64, base, CUDA_R_16BF));  // too many rows
  EXPECT_FALSE(cuda::skinny_gemm_supports(base, 0, base, 64, base, CUDA_R_16BF));
  EXPECT_FALSE(cuda::skinny_gemm_supports(base, 4, base, 48, base, CUDA_R_16BF));      // k not a multiple of 32
  EXPECT_FALSE(cuda::skinny_gemm_supports(base + 2, 4, base, 64, base, CUDA_R_16BF));  // misaligned x
  EXPECT_FALSE(cuda::skinny_gemm_supports(base, 4, base, 64, base, CUDA_R_16F));
  const Status refused =
      cuda::launch_skinny_gemm(reinterpret_cast<const bf16*>(base), 4, reinterpret_cast<const bf16*>(base), 8, 48,
                               memory->get(), CUDA_R_16BF, nullptr);
  EXPECT_FALSE(refused.is_ok());

  cuda::SkinnyFusion both;
  both.add_to_y = both.silu_gate = true;
  EXPECT_FALSE(cuda::skinny_fusion_supports(4, 64, both, CUDA_R_16BF));  // one epilogue at most
  cuda::SkinnyFusion add;
  add.add_to_y = true;
  EXPECT_TRUE(cuda::skinny_fusion_supports(4, 64, add, CUDA_R_16BF));
  EXPECT_FALSE(cuda::skinny_fusion_supports(4, 64, add, CUDA_R_32F));  // the residual stream is BF16
  cuda::SkinnyFusion norm;
  norm.norm_weight = reinterpret_cast<const bf16*>(base);
  EXPECT_TRUE(cuda::skinny_fusion_supports(8, 4096, norm, CUDA_R_16BF));
  EXPECT_FALSE(cuda::skinny_fusion_supports(32, 4096, norm, CUDA_R_16BF));  // x too large to stage
  norm.norm_weight = reinterpret_cast<const bf16*>(base + 2);
  EXPECT_FALSE(cuda::skinny_fusion_supports(8, 4096, norm, CUDA_R_16BF));  // misaligned norm weight
  EXPECT_FALSE(cuda::launch_skinny_gemm(reinterpret_cast<const bf16*>(base), 4, reinterpret_cast<const bf16*>(base), 8,
                                        64, memory->get(), CUDA_R_16BF, nullptr, both)
                   .is_ok());
}

// The algorithms Gemms lists for a shape: the one run() uses first, then
// others of the heuristic's, none twice, each computing the product. (That
// the first is run()'s own holds by construction; its equal bits below cannot
// prove it, since the heuristic's candidates for a shape may all agree.)
TEST_F(GpuSkinnyGemmTest, TheAlgorithmsListedForAShapeAreDistinctAndEachComputesTheProduct) {
  const int m = 256, n = 384, k = 512;
  const size_t workspace_bytes = size_t{32} << 20;
  auto workspace = cuda::device_alloc(workspace_bytes, "workspace");
  ASSERT_TRUE(workspace.is_ok());
  auto gemms = cuda::Gemms::create(nullptr, workspace->get(), workspace_bytes);
  ASSERT_TRUE(gemms.is_ok()) << gemms.status().to_string();
  const Product p{m, n, k, random_bf16(static_cast<size_t>(m) * k, 21), random_bf16(static_cast<size_t>(n) * k, 22)};
  cuda::DeviceMemory x = upload(p.x), w = upload(p.w);
  auto y = cuda::device_alloc(static_cast<size_t>(m) * n * sizeof(float), "y");
  ASSERT_TRUE(y.is_ok());
  const auto product = [&](const cuda::Gemms::Algorithm* algorithm) {
    EXPECT_EQ(cudaMemset(y->get(), 0xff, static_cast<size_t>(m) * n * sizeof(float)), cudaSuccess);  // NaN
    const Status status =
        algorithm ? gemms->run_algorithm(*algorithm, as_bf16(x), m, as_bf16(w), n, k, y->get(), CUDA_R_32F)
                  : gemms->run(as_bf16(x), m, as_bf16(w), n, k, y->get(), CUDA_R_32F);
    EXPECT_TRUE(status.is_ok()) << status.to_string();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return download(y->get(), static_cast<size_t>(m) * n, CUDA_R_32F);
  };
  auto algorithms = gemms->algorithms(m, n, k, CUDA_R_32F, 4);
  ASSERT_TRUE(algorithms.is_ok()) << algorithms.status().to_string();
  ASSERT_GE(algorithms->size(), 2u) << "cuBLASLt offers fewer than two algorithms for a plain BF16 product";
  EXPECT_EQ(product(&algorithms->front()), product(nullptr)) << algorithms->front().name;
  const std::vector<double> want = reference(p);
  for (size_t i = 0; i < algorithms->size(); ++i) {
    const cuda::Gemms::Algorithm& algorithm = (*algorithms)[i];
    for (size_t j = 0; j < i; ++j)
      EXPECT_NE((*algorithms)[j].config, algorithm.config) << "listed twice: " << algorithm.name;
    const std::vector<float> got = product(&algorithm);
    for (size_t e = 0; e < want.size(); ++e)
      ASSERT_NEAR(got[e], want[e], 1e-4 * std::sqrt(static_cast<double>(k))) << algorithm.name << ", element " << e;
  }
  auto none = gemms->algorithms(m, n, k, CUDA_R_32F, 0);
  ASSERT_TRUE(none.is_ok());
  EXPECT_TRUE(none->empty());
}


// The Hopper prefill kernel (model/cuda/gemm_sm90.h): its plain products
// against float64, every row it owns written and none past m, tiles past
// the grid's first turn and a ring whose phases wrap mid-tile; its epilogues
// the bits of its own plain product followed by the separate kernels they
// replace. Skipped on a GPU that is not a Hopper (compute capability 9.0).
class GpuSm90GemmTest : public GpuSkinnyGemmTest {
 protected:
  void SetUp() override {
    GpuSkinnyGemmTest::SetUp();
    if (IsSkipped()) return;
    auto memory = cuda::device_alloc(1 << 16, "probe");
    ASSERT_TRUE(memory.is_ok());
    if (!cuda::gemm_sm90_supports(memory->get(), 1, memory->get(), 256, 64, memory->get(),
                                  cuda::Sm90Epilogue::kStore)) {
      GTEST_SKIP() << "not a compute capability 9.0 device";
    }
  }

  // y (m + kGuardRows rows of n, poisoned) after the kernel; the rows past m must keep the poison.
  static constexpr int kGuardRows = 3;
  static std::vector<uint16_t> run(const cuda::DeviceMemory& x, int m, const cuda::DeviceMemory& w, int n, int k,
                                   cuda::Sm90Epilogue epilogue, const std::vector<bf16>* y_before = nullptr) {
    const size_t outputs = static_cast<size_t>(m + kGuardRows) * n;
    cuda::DeviceMemory y = y_before != nullptr ? upload(*y_before) : zeros(outputs);
    if (y_before == nullptr) {
      EXPECT_EQ(cudaMemset(y.get(), 0xff, outputs * sizeof(bf16)), cudaSuccess);
    }
    const Status status = cuda::launch_gemm_sm90(as_bf16(x), m, as_bf16(w), n, k, as_bf16(y), epilogue, nullptr);
    EXPECT_TRUE(status.is_ok()) << status.to_string();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return bits_of(y.get(), outputs);
  }
};

std::vector<bf16> from_bits(const std::vector<uint16_t>& bits) {
  std::vector<bf16> out;
  out.reserve(bits.size());
  for (uint16_t b : bits) {
    __nv_bfloat16_raw raw;
    raw.x = b;
    out.emplace_back(raw);
  }
  return out;
}

float bf16_bits_to_float(uint16_t bits) {
  const uint32_t word = uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &word, sizeof(f));
  return f;
}

TEST_F(GpuSm90GemmTest, MatchesAFloat64ReferenceAndWritesOnlyItsRows) {
  uint32_t seed = 400;
  // (m, n, k): one tile, row tails, several column tiles, slices that are not a multiple of the four stages.
  for (auto [m, n, k] : std::vector<std::tuple<int, int, int>>{
           {1, 256, 64}, {100, 256, 128}, {128, 512, 320}, {300, 768, 576}, {515, 256, 1024}}) {
    SCOPED_TRACE(::testing::Message() << "m " << m << " n " << n << " k " << k);
    const Product p{m, n, k, random_bf16(static_cast<size_t>(m) * k, seed), random_bf16(static_cast<size_t>(n) * k, seed + 1)};
    seed += 2;
    const std::vector<uint16_t> got = run(upload(p.x), m, upload(p.w), n, k, cuda::Sm90Epilogue::kStore);
    const std::vector<double> want = reference(p);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(bf16_bits_to_float(got[i]), want[i], 1e-3 * std::sqrt(static_cast<double>(k)) + 4e-3 * std::fabs(want[i]))
          << "element " << i;
    for (size_t i = want.size(); i < got.size(); ++i) ASSERT_EQ(got[i], 0xffff) << "written past m: " << i;
  }
}

// More tiles than multiprocessors: each block takes several, its ring of
// stages running on from one tile into the next.
TEST_F(GpuSm90GemmTest, AgreesWithCublasWhenEachBlockTakesManyTiles) {
  const int m = 2000, n = 4096, k = 448;  // 16 × 16 tiles, 7 slices each
  const std::vector<bf16> x = random_bf16(static_cast<size_t>(m) * k, 31), w = random_bf16(static_cast<size_t>(n) * k, 32);
  cuda::DeviceMemory dx = upload(x), dw = upload(w);
  const std::vector<uint16_t> got = run(dx, m, dw, n, k, cuda::Sm90Epilogue::kStore);
  auto workspace = cuda::device_alloc(size_t{32} << 20, "workspace");
  ASSERT_TRUE(workspace.is_ok());
  auto gemms = cuda::Gemms::create(nullptr, workspace->get(), size_t{32} << 20);
  ASSERT_TRUE(gemms.is_ok()) << gemms.status().to_string();
  auto y = cuda::device_alloc(static_cast<size_t>(m) * n * sizeof(float), "y");
  ASSERT_TRUE(y.is_ok());
  ASSERT_TRUE(gemms->run(as_bf16(dx), m, as_bf16(dw), n, k, y->get(), CUDA_R_32F).is_ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> want = download(y->get(), static_cast<size_t>(m) * n, CUDA_R_32F);
  // FP32 sums in two orders, then our one rounding to BF16.
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(bf16_bits_to_float(got[i]), want[i], 1e-4 * std::sqrt(static_cast<double>(k)) + 4e-3 * std::fabs(want[i]))
        << "element " << i;
  EXPECT_EQ(got, run(dx, m, dw, n, k, cuda::Sm90Epilogue::kStore));  // the same bits on a rerun
}

TEST_F(GpuSm90GemmTest, TheResidualAddGivesTheBitsOfThePlainProductThenTheAddKernel) {
  uint32_t seed = 500;
  for (auto [m, n, k] : std::vector<std::tuple<int, int, int>>{{70, 256, 128}, {1000, 4096, 512}}) {
    SCOPED_TRACE(::testing::Message() << "m " << m << " n " << n << " k " << k);
    cuda::DeviceMemory x = upload(random_bf16(static_cast<size_t>(m) * k, seed)),
                       w = upload(random_bf16(static_cast<size_t>(n) * k, seed + 1));
    const std::vector<bf16> residual = random_bf16(static_cast<size_t>(m + kGuardRows) * n, seed + 2);
    seed += 3;
    const std::vector<uint16_t> product = run(x, m, w, n, k, cuda::Sm90Epilogue::kStore);
    // The add kernel on the plain product.
    cuda::DeviceMemory separate = upload(residual), d = upload(from_bits(product)), normed = zeros(residual.size()),
                       norm = upload(random_bf16(static_cast<size_t>(n), seed));
    ASSERT_TRUE(cuda::launch_add_rms_norm(as_bf16(separate), as_bf16(d), as_bf16(norm), m, n, 1e-6f, as_bf16(normed),
                                          nullptr)
                    .is_ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint16_t> want = bits_of(separate.get(), residual.size());
    EXPECT_EQ(run(x, m, w, n, k, cuda::Sm90Epilogue::kAddToY, &residual), want);  // the guard rows unchanged too
  }
}

TEST_F(GpuSm90GemmTest, TheSiluGateGivesTheBitsOfThePlainProductThenTheGateKernel) {
  uint32_t seed = 600;
  for (auto [m, n, k] : std::vector<std::tuple<int, int, int>>{{33, 128, 64}, {700, 1536, 256}}) {
    SCOPED_TRACE(::testing::Message() << "m " << m << " n " << n << " k " << k);
    cuda::DeviceMemory x = upload(random_bf16(static_cast<size_t>(m) * k, seed)),
                       w = upload(random_bf16(2 * static_cast<size_t>(n) * k, seed + 1));  // gate rows, then up rows
    seed += 2;
    const std::vector<uint16_t> gate_up = run(x, m, w, 2 * n, k, cuda::Sm90Epilogue::kStore);
    cuda::DeviceMemory product = upload(from_bits(gate_up)), separate = zeros(static_cast<size_t>(m) * n);
    ASSERT_TRUE(cuda::launch_silu_mul(as_bf16(product), m, n, as_bf16(separate), nullptr).is_ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint16_t> want = bits_of(separate.get(), static_cast<size_t>(m) * n);
    const std::vector<uint16_t> got = run(x, m, w, n, k, cuda::Sm90Epilogue::kSiluGate);
    EXPECT_EQ(std::vector<uint16_t>(got.begin(), got.begin() + static_cast<ptrdiff_t>(want.size())), want);
    for (size_t i = want.size(); i < got.size(); ++i) ASSERT_EQ(got[i], 0xffff) << "written past m: " << i;
  }
}

TEST_F(GpuSm90GemmTest, RefusesWhatItCannotTake) {
  auto memory = cuda::device_alloc(1 << 20, "buffer");
  ASSERT_TRUE(memory.is_ok());
  const auto* base = static_cast<const std::byte*>(memory->get());
  using E = cuda::Sm90Epilogue;
  EXPECT_TRUE(cuda::gemm_sm90_supports(base, 1, base, 256, 64, base, E::kStore));
  EXPECT_TRUE(cuda::gemm_sm90_supports(base, 1, base, 128, 64, base, E::kSiluGate));
  EXPECT_FALSE(cuda::gemm_sm90_supports(base, 1, base, 128, 64, base, E::kStore));    // n not a multiple of 256
  EXPECT_FALSE(cuda::gemm_sm90_supports(base, 1, base, 64, 64, base, E::kSiluGate));  // nor of 128
  EXPECT_FALSE(cuda::gemm_sm90_supports(base, 0, base, 256, 64, base, E::kStore));
  EXPECT_FALSE(cuda::gemm_sm90_supports(base, 1, base, 256, 96, base, E::kStore));  // k not a multiple of 64
  EXPECT_FALSE(cuda::gemm_sm90_supports(base + 8, 1, base, 256, 64, base, E::kStore));  // misaligned x
  EXPECT_FALSE(cuda::gemm_sm90_supports(base, 1, base, 256, 64, base + 2, E::kAddToY));  // misaligned y
  EXPECT_FALSE(cuda::launch_gemm_sm90(reinterpret_cast<const bf16*>(base), 1, reinterpret_cast<const bf16*>(base), 256,
                                      96, static_cast<bf16*>(memory->get()), E::kStore, nullptr)
                   .is_ok());
}

}  // namespace
}  // namespace hiq
