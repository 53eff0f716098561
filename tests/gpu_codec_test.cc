// The GPU codec kernels write exactly the CPU reference's bytes and decode to
// exactly its values: every codec, many row shapes (odd head_dims and
// record_align 1 included, which take the kernels' byte-wise paths), every kind
// of data, non-finite and out-of-range heads, and arbitrary (corrupt) record
// bytes. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "codec/codec.h"
#include "codec/cuda/gpu_codec.h"
#include "codec_test_data.h"
#include "cuda/device.h"
#include "gpu_test_policy.h"

namespace hiq {
namespace {

using testing::RowKind;

struct GpuCodecCase {
  CodecKind codec;
  RowShape shape;
  size_t align;
};

std::vector<GpuCodecCase> cases() {
  const RowShape shapes[] = {{8, 128}, {1, 576}, {4, 64}, {2, 256}, {3, 40}, {2, 96},
                             {1, 8},   {1, 1024}, {5, 16}, {5, 33}, {3, 7},  {1, 1}};
  std::vector<GpuCodecCase> out;
  for (CodecKind c : kAllCodecs)
    for (RowShape s : shapes)
      for (size_t align : {size_t{16}, size_t{1}, size_t{128}})
        if (RecordLayout::make(c, s, align).is_ok()) out.push_back({c, s, align});
  return out;
}

std::string describe(const ::testing::TestParamInfo<GpuCodecCase>& info) {
  return std::string(codec_name(info.param.codec)) + "_" + std::to_string(info.param.shape.num_heads) + "x" +
         std::to_string(info.param.shape.head_dim) + "_align" + std::to_string(info.param.align);
}

class GpuCodec : public ::testing::TestWithParam<GpuCodecCase> {
 protected:
  void SetUp() override {
    HIQ_SKIP_OR_FAIL_WITHOUT_GPU();
    layout_ = *RecordLayout::make(GetParam().codec, GetParam().shape, GetParam().align);
  }

  // Encodes on both sides and compares bytes and counters; then decodes the
  // records on both sides and compares values.
  void check_rows(const std::vector<uint16_t>& rows) {
    const size_t n = rows.size() / layout_.shape.elements();
    std::vector<std::byte> cpu(layout_.record_bytes * n, std::byte{0xAB}), gpu(cpu.size(), std::byte{0xCD});
    CodecStats cpu_stats, gpu_stats;
    encode_rows(layout_, rows.data(), layout_.shape.elements(), n, cpu.data(), &cpu_stats, CodecImpl::kScalar);
    const Status encoded = cuda::gpu_encode_rows(layout_, rows.data(), n, gpu.data(), &gpu_stats);
    ASSERT_TRUE(encoded.is_ok()) << encoded.to_string();
    for (size_t r = 0; r < n; ++r)
      ASSERT_EQ(std::memcmp(cpu.data() + r * layout_.record_bytes, gpu.data() + r * layout_.record_bytes,
                            layout_.record_bytes),
                0)
          << "record " << r << " differs";
    EXPECT_EQ(gpu_stats.rows, n);
    EXPECT_EQ(cpu_stats.nonfinite_heads, gpu_stats.nonfinite_heads);
    EXPECT_EQ(cpu_stats.out_of_range_heads, gpu_stats.out_of_range_heads);
    check_decode(cpu);
  }

  void check_decode(const std::vector<std::byte>& records) {
    const size_t n = records.size() / layout_.record_bytes;
    std::vector<uint16_t> cpu(n * layout_.shape.elements(), 0x1111), gpu(cpu.size(), 0x2222);
    decode_rows(layout_, records.data(), n, cpu.data(), layout_.shape.elements(), CodecImpl::kScalar);
    const Status decoded = cuda::gpu_decode_rows(layout_, records.data(), n, gpu.data());
    ASSERT_TRUE(decoded.is_ok()) << decoded.to_string();
    for (size_t i = 0; i < cpu.size(); ++i) ASSERT_EQ(cpu[i], gpu[i]) << "element " << i;
  }

  RecordLayout layout_;
};

TEST_P(GpuCodec, EncodeIsByteIdenticalAndDecodeBitIdenticalToTheCpu) {
  for (RowKind kind : testing::kAllRowKinds) {
    SCOPED_TRACE(testing::row_kind_name(kind));
    // 333 rows: more than one warp's worth per block, and not a round number.
    check_rows(testing::make_rows(kind, GetParam().shape, 333, 77u + static_cast<uint32_t>(kind)));
  }
}

TEST_P(GpuCodec, NonFiniteAndOutOfRangeHeadsEncodeIdentically) {
  const RowShape shape = GetParam().shape;
  auto rows = testing::make_rows(RowKind::kGaussian, shape, 6, 99);
  const uint16_t specials[] = {0x7FC0, 0x7F80, 0xFF80, 0x7F81, 0x5F80 /* 2^64 */, 0xDF80 /* -2^64 */};
  for (size_t r = 0; r < 6; ++r) rows[r * shape.elements() + (r * 7) % shape.elements()] = specials[r];
  check_rows(rows);
}

TEST_P(GpuCodec, ArbitraryRecordBytesDecodeIdentically) {
  std::mt19937 rng(5);
  std::vector<std::byte> records(layout_.record_bytes * 97);
  for (auto& b : records) b = static_cast<std::byte>(rng());
  check_decode(records);
}

INSTANTIATE_TEST_SUITE_P(AllCodecsShapesAndAlignments, GpuCodec, ::testing::ValuesIn(cases()), describe);

}  // namespace
}  // namespace hiq
