// The CPU operations of the forward pass against straightforward double-precision
// references, and the rotary tables (default, llama3, yarn) against their
// definitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "codec/numeric.h"
#include "core/parallel.h"
#include "model/cpu_ops.h"
#include "model/rope.h"
#include "random_floats.h"

namespace hiq {
namespace {

using cpu::MatrixView;
using cpu::VectorView;
using cpu::WeightType;

using testing::random_floats;

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = numeric::float_to_bf16(v[i]);
  return out;
}

// Rounds every value to BF16 in place (K and V as L1 holds them), returning the bits.
std::vector<uint16_t> round_to_bf16_bits(std::vector<float>& v) {
  std::vector<uint16_t> bits = to_bf16(v);
  for (size_t i = 0; i < v.size(); ++i) v[i] = numeric::bf16_to_float(bits[i]);
  return bits;
}

double max_relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num = std::max(num, std::fabs(got[i] - want[i]));
    den = std::max(den, std::fabs(want[i]));
  }
  return num / den;
}

TEST(CpuOps, MatmulMatchesADoubleReferenceForEveryWeightType) {
  const int64_t m = 5, rows = 37, cols = 67;
  const auto x = random_floats(static_cast<size_t>(m * cols), 1);
  const auto wf = random_floats(static_cast<size_t>(rows * cols), 2, 0.1f);
  const auto bias = random_floats(static_cast<size_t>(rows), 3);
  const auto wb = to_bf16(wf);
  // F16 copies of exactly representable values (multiples of 2^-10 below 2).
  std::vector<uint16_t> wh(wf.size());
  std::vector<float> wh_values(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) {
    const int q = static_cast<int>(std::lround(wf[i] * 1024)) % 1024;  // |q| < 1024
    wh_values[i] = static_cast<float>(q) / 1024.0f;
    const uint16_t sign = q < 0 ? uint16_t{0x8000} : uint16_t{0};
    const int a = std::abs(q);
    if (a == 0) {
      wh[i] = sign;
    } else {  // a · 2^-10 = 1.m · 2^e
      int e = 0;
      while ((a >> e) > 1) ++e;
      const uint16_t mantissa = static_cast<uint16_t>(((a << (10 - e)) & 0x3FF));
      wh[i] = static_cast<uint16_t>(sign | ((e - 10 + 15) << 10) | mantissa);
    }
  }
  struct Case {
    WeightType type;
    const void* data;
    std::vector<double> weights;
  };
  std::vector<Case> cases;
  cases.push_back({WeightType::kF32, wf.data(), std::vector<double>(wf.begin(), wf.end())});
  std::vector<double> wb_values(wb.size());
  for (size_t i = 0; i < wb.size(); ++i) wb_values[i] = numeric::bf16_to_float(wb[i]);
  cases.push_back({WeightType::kBf16, wb.data(), wb_values});
  cases.push_back({WeightType::kF16, wh.data(), std::vector<double>(wh_values.begin(), wh_values.end())});
  for (const Case& c : cases) {
    std::vector<float> y(static_cast<size_t>(m * rows), NAN);
    cpu::matmul(x.data(), m, MatrixView{c.type, c.data, rows, cols}, VectorView{WeightType::kF32, bias.data(), rows},
                y.data());
    std::vector<double> want(y.size());
    for (int64_t t = 0; t < m; ++t)
      for (int64_t j = 0; j < rows; ++j) {
        double s = bias[static_cast<size_t>(j)];
        for (int64_t i = 0; i < cols; ++i)
          s += static_cast<double>(x[static_cast<size_t>(t * cols + i)]) * c.weights[static_cast<size_t>(j * cols + i)];
        want[static_cast<size_t>(t * rows + j)] = s;
      }
    EXPECT_LT(max_relative_error(y, want), 1e-5) << "weight type " << static_cast<int>(c.type);
  }
}

TEST(CpuOps, ProductsInOneLoopGiveTheBitsOfEachAloneOnAnyThreads) {
  // Three matrices of one x (q, k and v's shape, with and without a bias).
  // The loop over their 500 rows is split into ranges of at least 342 rows
  // at one row of x (the first straddles the first two matrices) and of 49
  // at 7 rows (several straddle).
  const int64_t cols = 96;
  const int64_t rows[] = {300, 100, 100};
  const int before = parallel_threads();
  for (const int64_t m : {int64_t{1}, int64_t{7}}) {
    const auto x = random_floats(static_cast<size_t>(m * cols), 11);
    std::vector<std::vector<uint16_t>> w;
    std::vector<std::vector<float>> bias;
    std::vector<cpu::Product> products;
    for (int i = 0; i < 3; ++i) {
      w.push_back(to_bf16(random_floats(static_cast<size_t>(rows[i] * cols), 12 + i, 0.1f)));
      bias.push_back(random_floats(static_cast<size_t>(rows[i]), 20 + i));
    }
    std::vector<std::vector<float>> alone(3), together(3);
    for (int i = 0; i < 3; ++i) {
      const MatrixView view{WeightType::kBf16, w[i].data(), rows[i], cols};
      const VectorView b = i == 1 ? VectorView{} : VectorView{WeightType::kF32, bias[i].data(), rows[i]};
      alone[i].assign(static_cast<size_t>(m * rows[i]), NAN);
      together[i].assign(static_cast<size_t>(m * rows[i]), NAN);
      set_parallel_threads(1);
      cpu::matmul(x.data(), m, view, b, alone[i].data());
      products.push_back({view, b, together[i].data()});
    }
    for (const int threads : {1, 2, 3, 8}) {
      set_parallel_threads(threads);
      for (auto& y : together) std::fill(y.begin(), y.end(), NAN);
      cpu::matmuls(x.data(), m, products);
      for (int i = 0; i < 3; ++i) EXPECT_EQ(together[i], alone[i]) << "matrix " << i << ", m " << m << ", " << threads << " threads";
    }
  }
  set_parallel_threads(before);
}

TEST(CpuOps, RmsNormSiluAndBf16RoundingMatchTheirDefinitions) {
  const int64_t m = 3, n = 64;
  const auto x = random_floats(static_cast<size_t>(m * n), 4, 3.0f);
  const auto w = random_floats(static_cast<size_t>(n), 5);
  std::vector<float> y(x.size());
  cpu::rms_norm(x.data(), m, n, VectorView{WeightType::kF32, w.data(), n}, 1e-6f, y.data());
  std::vector<double> want(y.size());
  for (int64_t t = 0; t < m; ++t) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += std::pow(x[static_cast<size_t>(t * n + i)], 2);
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + 1e-6);
    for (int64_t i = 0; i < n; ++i)
      want[static_cast<size_t>(t * n + i)] = x[static_cast<size_t>(t * n + i)] * inv * w[static_cast<size_t>(i)];
  }
  EXPECT_LT(max_relative_error(y, want), 1e-6);

  const auto gate = random_floats(100, 6, 4.0f), up = random_floats(100, 7);
  std::vector<float> out(100);
  cpu::silu_mul(gate.data(), up.data(), 100, out.data());
  std::vector<double> silu(100);
  for (size_t i = 0; i < 100; ++i) silu[i] = gate[i] / (1.0 + std::exp(-static_cast<double>(gate[i]))) * up[i];
  EXPECT_LT(max_relative_error(out, silu), 1e-6);

  std::vector<float> r = {1.0f, 1.00390625f, 1.005859375f, -3.14159265f};
  cpu::round_to_bf16(r.data(), r.size());
  EXPECT_EQ(r[0], 1.0f);
  EXPECT_EQ(r[1], 1.0f);           // exactly halfway: ties to even
  EXPECT_EQ(r[2], 1.0078125f);     // above halfway: up
  EXPECT_EQ(r[3], -3.140625f);
}

TEST(CpuOps, RopeRotatesHalvesByPositionTimesFrequency) {
  const int heads = 2, dim = 8;
  auto table = make_rope_table(dim, 10000.0, {}, 4096);
  ASSERT_TRUE(table.is_ok());
  ASSERT_EQ(table->inv_freq.size(), 4u);
  EXPECT_FLOAT_EQ(table->inv_freq[0], 1.0f);
  EXPECT_FLOAT_EQ(table->inv_freq[1], 0.1f);
  EXPECT_FLOAT_EQ(table->inv_freq[2], 0.01f);
  EXPECT_FLOAT_EQ(table->inv_freq[3], 0.001f);
  const auto x = random_floats(heads * dim, 8);
  auto y = x;
  cpu::apply_rope(y.data(), heads, dim, 0, *table);
  EXPECT_EQ(y, x);  // position 0: no rotation
  y = x;
  cpu::apply_rope(y.data(), heads, dim, 7, *table);
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < dim / 2; ++i) {
      const double theta = 7.0 * table->inv_freq[static_cast<size_t>(i)];
      const double a = x[static_cast<size_t>(h * dim + i)], b = x[static_cast<size_t>(h * dim + i + dim / 2)];
      EXPECT_NEAR(y[static_cast<size_t>(h * dim + i)], a * std::cos(theta) - b * std::sin(theta), 1e-5);
      EXPECT_NEAR(y[static_cast<size_t>(h * dim + i + dim / 2)], b * std::cos(theta) + a * std::sin(theta), 1e-5);
    }
}

TEST(CpuOps, AttentionIsCausalGroupedAndMatchesADoubleReference) {
  const int heads = 4, kv_heads = 2, dim = 16;
  const int64_t n_kv = 9, n_q = 3, first = 5;  // queries at positions 5, 6, 7; key 8 is in the future
  auto q = random_floats(static_cast<size_t>(n_q * heads * dim), 9);
  auto k = random_floats(static_cast<size_t>(n_kv * kv_heads * dim), 10);
  auto v = random_floats(static_cast<size_t>(n_kv * kv_heads * dim), 11);
  auto kb = round_to_bf16_bits(k);
  const auto vb = round_to_bf16_bits(v);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  std::vector<float> out(q.size(), NAN);
  cpu::attention(q.data(), n_q, kb.data(), vb.data(), n_kv, heads, kv_heads, dim, first, scale, out.data());
  std::vector<double> want(out.size());
  for (int64_t t = 0; t < n_q; ++t)
    for (int h = 0; h < heads; ++h) {
      const int kvh = h / (heads / kv_heads);
      std::vector<double> p;
      double max_s = -1e300;
      for (int64_t j = 0; j <= first + t; ++j) {
        double s = 0;
        for (int d = 0; d < dim; ++d)
          s += static_cast<double>(q[static_cast<size_t>((t * heads + h) * dim + d)]) *
               k[static_cast<size_t>((j * kv_heads + kvh) * dim + d)];
        p.push_back(s * scale);
        max_s = std::max(max_s, p.back());
      }
      double total = 0;
      for (double& s : p) total += (s = std::exp(s - max_s));
      for (int d = 0; d < dim; ++d) {
        double o = 0;
        for (size_t j = 0; j < p.size(); ++j) o += p[j] / total * v[(j * kv_heads + kvh) * dim + d];
        want[static_cast<size_t>((t * heads + h) * dim + d)] = o;
      }
    }
  EXPECT_LT(max_relative_error(out, want), 1e-5);
  // The future key and value change nothing.
  for (int i = 0; i < kv_heads * dim; ++i) kb[static_cast<size_t>(8 * kv_heads * dim + i)] = numeric::float_to_bf16(1e6f);
  std::vector<float> again(out.size());
  cpu::attention(q.data(), n_q, kb.data(), vb.data(), n_kv, heads, kv_heads, dim, first, scale, again.data());
  EXPECT_EQ(again, out);
}

// Rows longer than a key block (cpu_ops.h) merge their blocks' softmaxes: a
// query alone (a decode step, whose blocks run side by side) gives the bits it
// gets in a prefill of every query (where one thread runs a row's blocks in
// turn), on any number of threads, and both stay within float rounding of
// the double-precision definition.
TEST(CpuOps, LongRowsAreTheSameBitsAloneOrInAPrefillOnAnyThreads) {
  const int heads = 4, kv_heads = 2, dim = 24;
  const int64_t n = 3 * cpu::kAttentionKeyBlock + 77;
  const auto q = random_floats(static_cast<size_t>(n * heads * dim), 21);
  auto k = random_floats(static_cast<size_t>(n * kv_heads * dim), 22);
  auto v = random_floats(static_cast<size_t>(n * kv_heads * dim), 23);
  const auto kb = round_to_bf16_bits(k), vb = round_to_bf16_bits(v);
  const float scale = 0.5f;
  const int64_t row = int64_t{heads} * dim;
  const int before = parallel_threads();
  std::vector<float> prefill(q.size());
  set_parallel_threads(1);
  cpu::attention(q.data(), n, kb.data(), vb.data(), n, heads, kv_heads, dim, 0, scale, prefill.data());
  for (int threads : {1, 2, 3}) {
    set_parallel_threads(threads);
    std::vector<float> again(q.size());
    cpu::attention(q.data(), n, kb.data(), vb.data(), n, heads, kv_heads, dim, 0, scale, again.data());
    EXPECT_EQ(again, prefill) << threads << " threads";
    for (int64_t t : {int64_t{0}, cpu::kAttentionKeyBlock - 1, cpu::kAttentionKeyBlock, 2 * cpu::kAttentionKeyBlock + 5,
                      n - 1}) {
      std::vector<float> alone(static_cast<size_t>(row));
      cpu::attention(q.data() + t * row, 1, kb.data(), vb.data(), t + 1, heads, kv_heads, dim, t, scale, alone.data());
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), prefill.begin() + t * row))
          << "query " << t << " on " << threads << " threads";
    }
  }
  set_parallel_threads(before);

  // The last query, which sees every block, against double precision.
  const int64_t t = n - 1;
  std::vector<double> want(static_cast<size_t>(row));
  for (int h = 0; h < heads; ++h) {
    const int kvh = h / (heads / kv_heads);
    std::vector<double> p(static_cast<size_t>(n));
    double max_s = -1e300, total = 0;
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int d = 0; d < dim; ++d)
        s += static_cast<double>(q[static_cast<size_t>((t * heads + h) * dim + d)]) *
             k[static_cast<size_t>((j * kv_heads + kvh) * dim + d)];
      p[static_cast<size_t>(j)] = s * scale;
      max_s = std::max(max_s, s * scale);
    }
    for (double& s : p) total += (s = std::exp(s - max_s));
    for (int d = 0; d < dim; ++d) {
      double o = 0;
      for (int64_t j = 0; j < n; ++j) o += p[static_cast<size_t>(j)] / total * v[static_cast<size_t>((j * kv_heads + kvh) * dim + d)];
      want[static_cast<size_t>(h * dim + d)] = o;
    }
  }
  const std::vector<float> last(prefill.begin() + t * row, prefill.end());
  EXPECT_LT(max_relative_error(last, want), 1e-5);
}

TEST(Rope, Llama3ScalingKeepsHighFrequenciesAndDividesLowOnes) {
  RopeScaling s;
  s.kind = RopeScaling::Kind::kLlama3;
  s.factor = 8;
  s.low_freq_factor = 1;
  s.high_freq_factor = 4;
  s.original_max_position_embeddings = 8192;
  auto plain = make_rope_table(128, 500000.0, {}, 131072);
  auto scaled = make_rope_table(128, 500000.0, s, 131072);
  ASSERT_TRUE(plain.is_ok() && scaled.is_ok());
  for (size_t i = 0; i < 64; ++i) {
    const double wavelen = 2 * std::numbers::pi / plain->inv_freq[i];
    if (wavelen < 8192.0 / 4) {
      EXPECT_EQ(scaled->inv_freq[i], plain->inv_freq[i]) << i;
    }
    if (wavelen > 8192.0) {
      EXPECT_FLOAT_EQ(scaled->inv_freq[i], plain->inv_freq[i] / 8) << i;
    }
    EXPECT_LE(scaled->inv_freq[i], plain->inv_freq[i]);
    EXPECT_GE(scaled->inv_freq[i], plain->inv_freq[i] / 8 * (1 - 1e-6));
  }
  EXPECT_EQ(scaled->attention_scale, 1.0f);
}

TEST(Rope, YarnInterpolatesLowFrequenciesAndScalesAttention) {
  RopeScaling s;
  s.kind = RopeScaling::Kind::kYarn;
  s.factor = 4;
  s.original_max_position_embeddings = 32768;
  auto plain = make_rope_table(128, 1000000.0, {}, 131072);
  auto scaled = make_rope_table(128, 1000000.0, s, 131072);
  ASSERT_TRUE(plain.is_ok() && scaled.is_ok());
  EXPECT_FLOAT_EQ(scaled->inv_freq.front(), plain->inv_freq.front());       // fastest: extrapolated
  EXPECT_FLOAT_EQ(scaled->inv_freq.back(), plain->inv_freq.back() / 4);     // slowest: interpolated
  EXPECT_FLOAT_EQ(scaled->attention_scale, static_cast<float>(0.1 * std::log(4.0) + 1.0));
}

// transformers' attention factor: mscale / mscale_all_dim's ratio only when
// both are set (non-zero); otherwise the default 0.1 ln(factor) + 1.
TEST(Rope, YarnAttentionFactorIsTheMscaleRatioOnlyWhenBothAreSet) {
  const auto factor_of = [](double mscale, double mscale_all_dim) {
    RopeScaling s;
    s.kind = RopeScaling::Kind::kYarn;
    s.factor = 4;
    s.mscale = mscale;
    s.mscale_all_dim = mscale_all_dim;
    auto table = make_rope_table(64, 10000.0, s, 8192);
    EXPECT_TRUE(table.is_ok());
    return table ? table->attention_scale : 0.0f;
  };
  const auto mscale = [](double m) { return 0.1 * m * std::log(4.0) + 1.0; };
  const float plain = static_cast<float>(mscale(1));
  EXPECT_FLOAT_EQ(factor_of(0, 0), plain);
  EXPECT_FLOAT_EQ(factor_of(0, 1), plain);  // mscale absent: not a ratio (it would be 1)
  EXPECT_FLOAT_EQ(factor_of(2, 0), plain);
  EXPECT_FLOAT_EQ(factor_of(1, 1), 1.0f);
  EXPECT_FLOAT_EQ(factor_of(0.707, 0.707), 1.0f);
  EXPECT_FLOAT_EQ(factor_of(1, 0.5), static_cast<float>(mscale(1) / mscale(0.5)));
}

TEST(Rope, BadParametersAreClearErrors) {
  EXPECT_EQ(make_rope_table(7, 10000.0, {}, 4096).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(make_rope_table(8, 1.0, {}, 4096).status().code(), StatusCode::kInvalidArgument);
  RopeScaling bad;
  bad.kind = RopeScaling::Kind::kLlama3;
  bad.factor = 8;
  bad.low_freq_factor = 4;
  bad.high_freq_factor = 1;
  EXPECT_EQ(make_rope_table(8, 10000.0, bad, 4096).status().code(), StatusCode::kInvalidArgument);
  bad.kind = RopeScaling::Kind::kYarn;
  bad.beta_fast = 1;
  bad.beta_slow = 32;
  EXPECT_EQ(make_rope_table(8, 10000.0, bad, 4096).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace hiq
