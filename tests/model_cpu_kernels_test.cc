// The CPU forward pass's inner loops (model/cpu_kernels.h): the scalar
// reference follows the summation order the header writes down (checked
// against this file's own transcription of it), and every vector
// implementation this CPU runs gives the reference's bits, for every weight
// type, the odd lengths whose tails go through the zero-padded path, and any
// number of tokens computed together.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "codec/numeric.h"
#include "model/cpu_kernels.h"
#include "random_floats.h"

namespace hiq {
namespace {

using cpu::MatrixView;
using cpu::WeightType;
namespace kernels = cpu::kernels;

using testing::random_floats;

// The order of cpu_kernels.h, transcribed: 16 fused lanes over the
// zero-padded length, then the tree.
float canonical_dot(const float* a, const float* b, int64_t n) {
  float lane[16] = {};
  const int64_t padded = (n + 15) / 16 * 16;
  for (int64_t i = 0; i < padded; ++i) {
    const float x = i < n ? a[i] : 0.0f, y = i < n ? b[i] : 0.0f;
    lane[i % 16] = std::fma(x, y, lane[i % 16]);
  }
  for (int l = 0; l < 8; ++l) lane[l] += lane[l + 8];
  for (int l = 0; l < 4; ++l) lane[l] += lane[l + 4];
  for (int l = 0; l < 2; ++l) lane[l] += lane[l + 2];
  return lane[0] + lane[1];
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) return false;
  return true;
}

// The tables to check: the reference and whatever this CPU runs beside it.
// (A CPU without AVX2 or AVX-512 checks fewer: the test prints which it checked.)
std::vector<const kernels::Table*> tables() {
  std::vector<const kernels::Table*> t = {&kernels::scalar_table()};
  if (kernels::avx2_table() != nullptr) t.push_back(kernels::avx2_table());
  if (kernels::avx512_table() != nullptr) t.push_back(kernels::avx512_table());
  std::string names;
  for (const kernels::Table* table : t) names += std::string(names.empty() ? "" : ", ") + table->name;
  std::printf("[ measured ] kernels checked on this CPU: %s (the forward pass runs %s)\n", names.c_str(),
              kernels::best_table().name);
  return t;
}

// A weight matrix in each stored type, with the float values the kernels must
// widen it to.
struct Weights {
  WeightType type;
  std::vector<uint16_t> halves;  // BF16 or F16 bits
  std::vector<float> floats;     // F32 storage, or the widened values
  MatrixView view(int64_t rows, int64_t cols) const {
    return MatrixView{type, type == WeightType::kF32 ? static_cast<const void*>(floats.data()) : halves.data(), rows,
                      cols};
  }
};

std::vector<Weights> weights_of(const std::vector<float>& w) {
  Weights bf16{WeightType::kBf16, {}, {}}, f16{WeightType::kF16, {}, {}}, f32{WeightType::kF32, {}, w};
  for (float x : w) {
    bf16.halves.push_back(numeric::float_to_bf16(x));
    bf16.floats.push_back(numeric::bf16_to_float(bf16.halves.back()));
    // F16 bits with a random-looking mantissa and exponents around 1: every
    // finite normal half in [2^-4, 2^4).
    const auto bits = static_cast<uint16_t>((std::bit_cast<uint32_t>(x) >> 13 & 0x3FF) | (11 + (f16.halves.size() % 8)) << 10 |
                                            (x < 0 ? 0x8000 : 0));
    f16.halves.push_back(bits);
    f16.floats.push_back(numeric::f16_to_float(bits));
  }
  return {bf16, f16, f32};
}

TEST(CpuKernels, TheReferenceMatmulIsTheWrittenOrder) {
  const int64_t m = 3, rows = 5;
  for (int64_t cols : {1, 15, 16, 17, 40, 67}) {
    const auto x = random_floats(static_cast<size_t>(m * cols), 1);
    const auto bias = random_floats(static_cast<size_t>(rows), 2);
    for (const Weights& w : weights_of(random_floats(static_cast<size_t>(rows * cols), 3, 0.3f))) {
      std::vector<float> y(static_cast<size_t>(m * rows));
      kernels::scalar_table().matmul_rows(x.data(), m, w.view(rows, cols), 0, rows, bias.data(), y.data());
      std::vector<float> want(y.size());
      for (int64_t t = 0; t < m; ++t)
        for (int64_t r = 0; r < rows; ++r)
          want[static_cast<size_t>(t * rows + r)] =
              canonical_dot(x.data() + t * cols, w.floats.data() + r * cols, cols) + bias[static_cast<size_t>(r)];
      EXPECT_TRUE(same_bits(y, want)) << "cols " << cols << ", weight type " << static_cast<int>(w.type);
    }
  }
}

TEST(CpuKernels, EveryImplementationGivesTheReferenceBits) {
  const int64_t rows = 37;
  for (const kernels::Table* table : tables()) {
    SCOPED_TRACE(table->name);
    for (int64_t cols : {1, 15, 16, 17, 67, 256}) {
      for (const Weights& w : weights_of(random_floats(static_cast<size_t>(rows * cols), 4, 0.3f))) {
        for (int64_t m : {1, 2, 3, 5, 8, 9, 13, 17}) {
          const auto x = random_floats(static_cast<size_t>(m * cols), 5 + static_cast<uint32_t>(m));
          const auto bias = random_floats(static_cast<size_t>(rows), 6);
          std::vector<float> want(static_cast<size_t>(m * rows)), got(want.size(), NAN);
          kernels::scalar_table().matmul_rows(x.data(), m, w.view(rows, cols), 0, rows, bias.data(), want.data());
          // The rows in two ranges, as two threads would take them.
          table->matmul_rows(x.data(), m, w.view(rows, cols), 0, 11, bias.data(), got.data());
          table->matmul_rows(x.data(), m, w.view(rows, cols), 11, rows, bias.data(), got.data());
          EXPECT_TRUE(same_bits(got, want)) << "m " << m << ", cols " << cols << ", weight type "
                                            << static_cast<int>(w.type);
        }
      }
    }
    // Attention's two halves over BF16 rows found by slot (three KV heads of
    // n a row, head 1 read, the rows in a scattered order).
    for (int n : {8, 16, 24, 64, 128, 130}) {
      const int64_t stride = 3 * n, count = 45, first = 3;
      const auto q = random_floats(static_cast<size_t>(n), 7);
      std::vector<uint16_t> plane;
      for (float x : random_floats(static_cast<size_t>(64 * stride), 8)) plane.push_back(numeric::float_to_bf16(x));
      std::vector<uint32_t> slots(static_cast<size_t>(first + count));
      for (size_t j = 0; j < slots.size(); ++j) slots[j] = static_cast<uint32_t>((j * 29) % 64);
      const kernels::Bf16Rows context{plane.data() + n, slots.data(), stride};
      const auto value = [&](int64_t j, int d) {  // element d of context row first + j, widened
        return numeric::bf16_to_float(plane[static_cast<size_t>(n + slots[static_cast<size_t>(first + j)] * stride + d)]);
      };
      std::vector<float> want(static_cast<size_t>(count)), got(want.size(), NAN);
      kernels::scalar_table().dots(q.data(), context, first, count, n, want.data());
      table->dots(q.data(), context, first, count, n, got.data());
      EXPECT_TRUE(same_bits(got, want)) << "dots, n " << n;
      for (int64_t j = 0; j < count; ++j) {
        std::vector<float> key(static_cast<size_t>(n));
        for (int d = 0; d < n; ++d) key[static_cast<size_t>(d)] = value(j, d);
        EXPECT_EQ(std::bit_cast<uint32_t>(want[static_cast<size_t>(j)]),
                  std::bit_cast<uint32_t>(canonical_dot(q.data(), key.data(), n)));
      }

      const auto p = random_floats(static_cast<size_t>(count), 9);
      std::vector<float> sum_want(static_cast<size_t>(n)), sum_got(sum_want.size(), NAN);
      kernels::scalar_table().weighted_sum(p.data(), context, first, count, n, sum_want.data());
      table->weighted_sum(p.data(), context, first, count, n, sum_got.data());
      EXPECT_TRUE(same_bits(sum_got, sum_want)) << "weighted_sum, n " << n;
      for (int d = 0; d < n; ++d) {
        float o = 0;
        for (int64_t j = 0; j < count; ++j) o = std::fma(p[static_cast<size_t>(j)], value(j, d), o);
        EXPECT_EQ(std::bit_cast<uint32_t>(sum_want[static_cast<size_t>(d)]), std::bit_cast<uint32_t>(o)) << d;
      }
    }
  }
}

// A row's result does not depend on which other tokens share its product: a
// decode step computes its token's rows alone, a prefill in blocks.
TEST(CpuKernels, ATokensRowsAreTheSameAloneOrInABatch) {
  const int64_t rows = 29, cols = 70, m = 19;
  const auto x = random_floats(static_cast<size_t>(m * cols), 10);
  const auto w = weights_of(random_floats(static_cast<size_t>(rows * cols), 11, 0.3f))[0];
  const kernels::Table& table = kernels::best_table();
  std::vector<float> batch(static_cast<size_t>(m * rows));
  table.matmul_rows(x.data(), m, w.view(rows, cols), 0, rows, nullptr, batch.data());
  for (int64_t t = 0; t < m; ++t) {
    std::vector<float> alone(static_cast<size_t>(rows));
    table.matmul_rows(x.data() + t * cols, 1, w.view(rows, cols), 0, rows, nullptr, alone.data());
    EXPECT_TRUE(same_bits(alone, std::vector<float>(batch.begin() + t * rows, batch.begin() + (t + 1) * rows)))
        << "token " << t;
  }
}

}  // namespace
}  // namespace hiq
