#include "codec/codec.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>
#include <vector>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "codec/kernels.h"
#include "core/check.h"

namespace hiq {

std::string_view codec_name(CodecKind codec) {
  switch (codec) {
    case CodecKind::kBf16: return "bf16";
    case CodecKind::kInt8: return "int8";
    case CodecKind::kFp8: return "fp8";
    case CodecKind::kInt4: return "int4";
    case CodecKind::kInt4H: return "int4h";
  }
  return "?";
}

Result<CodecKind> parse_codec(std::string_view name) {
  for (CodecKind c : kAllCodecs)
    if (codec_name(c) == name) return c;
  return invalid_argument("unknown codec '" + std::string(name) + "' (expected bf16, int8, fp8, int4 or int4h)");
}

std::string KvCodecs::name() const {
  if (!split()) return std::string(codec_name(k));
  return "k=" + std::string(codec_name(k)) + ",v=" + std::string(codec_name(v));
}

Result<KvCodecs> parse_kv_codecs(std::string_view spec) {
  if (spec.find('=') == std::string_view::npos) {
    HIQ_ASSIGN_OR_RETURN(const CodecKind both, parse_codec(spec));
    return KvCodecs(both);
  }
  std::optional<CodecKind> k, v;
  for (size_t start = 0; start <= spec.size();) {
    const size_t comma = std::min(spec.find(',', start), spec.size());
    const std::string_view item = spec.substr(start, comma - start);
    const size_t eq = item.find('=');
    const std::string_view part = item.substr(0, eq);
    if (eq == std::string_view::npos || (part != "k" && part != "v"))
      return invalid_argument("codec spec '" + std::string(spec) + "': '" + std::string(item) +
                              "' is not k=CODEC or v=CODEC");
    std::optional<CodecKind>& slot = part == "k" ? k : v;
    if (slot) return invalid_argument("codec spec '" + std::string(spec) + "' names " + std::string(part) + " twice");
    auto codec = parse_codec(item.substr(eq + 1));
    if (!codec) return codec.status().with_context("codec spec '" + std::string(spec) + "'");
    slot = *codec;
    start = comma + 1;
  }
  return KvCodecs(k.value_or(*v), v.value_or(*k));
}

namespace {

Status check_layout_args(CodecKind codec, RowShape shape, size_t record_align) {
  if (static_cast<size_t>(codec) >= std::size(kAllCodecs))
    return invalid_argument("record layout: codec " + std::to_string(static_cast<int>(codec)) + " does not exist");
  if (shape.num_heads <= 0 || shape.head_dim <= 0)
    return invalid_argument("record layout: row shape " + std::to_string(shape.num_heads) + "×" +
                            std::to_string(shape.head_dim) + " is empty");
  if (shape.head_dim > kMaxHeadDim)
    return out_of_range("record layout: head_dim " + std::to_string(shape.head_dim) + " exceeds " +
                        std::to_string(kMaxHeadDim));
  if (shape.elements() > kMaxRowElements)
    return out_of_range("record layout: a row of " + std::to_string(shape.num_heads) + " heads × " +
                        std::to_string(shape.head_dim) + " exceeds " + std::to_string(kMaxRowElements) +
                        " elements");
  if (record_align == 0 || record_align > kMaxRecordAlign || !std::has_single_bit(record_align))
    return invalid_argument("--record-align must be a power of two from 1 to " + std::to_string(kMaxRecordAlign) +
                            " (got " + std::to_string(record_align) + ")");
  if (codec == CodecKind::kInt4H && !std::has_single_bit(static_cast<unsigned>(shape.head_dim)))
    return invalid_argument("codec int4h needs a power-of-two head_dim for its Walsh–Hadamard rotation (got " +
                            std::to_string(shape.head_dim) + "); use int4 instead");
  return Status::ok();
}

}  // namespace

Result<RecordLayout> RecordLayout::make(CodecKind codec, RowShape shape, size_t record_align) {
  HIQ_RETURN_IF_ERROR(check_layout_args(codec, shape, record_align));
  return compute(codec, shape, record_align);
}

bool RecordLayout::is_valid() const {
  return check_layout_args(codec, shape, record_align).is_ok() && *this == compute(codec, shape, record_align);
}

std::string_view codec_impl_name(CodecImpl impl) {
  switch (impl) {
    case CodecImpl::kAuto: return "auto";
    case CodecImpl::kScalar: return "scalar";
    case CodecImpl::kAvx2: return "avx2";
    case CodecImpl::kAvx512: return "avx512";
  }
  return "?";
}

bool codec_impl_supported(CodecImpl impl) {
  switch (impl) {
    case CodecImpl::kAuto:
    case CodecImpl::kScalar:
      return true;
    case CodecImpl::kAvx2:
#if defined(__x86_64__)
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
             codec_detail::avx2_kernels() != nullptr;
#else
      return false;
#endif
    case CodecImpl::kAvx512:
#if defined(__x86_64__)
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             codec_impl_supported(CodecImpl::kAvx2) && codec_detail::avx512_kernels() != nullptr;
#else
      return false;
#endif
  }
  return false;
}

CodecImpl best_codec_impl() {
  static const CodecImpl best = codec_impl_supported(CodecImpl::kAvx512) ? CodecImpl::kAvx512
                                : codec_impl_supported(CodecImpl::kAvx2) ? CodecImpl::kAvx2
                                                                         : CodecImpl::kScalar;
  return best;
}

namespace {

// Sets the default SSE floating-point environment (round to nearest even, no
// FTZ/DAZ, exceptions masked) for its scope and restores the caller's after.
class DefaultFloatEnvironment {
 public:
#if defined(__x86_64__)
  DefaultFloatEnvironment() : saved_(_mm_getcsr()) {
    if (saved_ != kDefault) _mm_setcsr(kDefault);
  }
  ~DefaultFloatEnvironment() {
    if (saved_ != kDefault) _mm_setcsr(saved_);
  }

 private:
  static constexpr unsigned kDefault = 0x1F80;
  unsigned saved_;
#endif
};

// The one dispatch point: implementation × codec → row kernel table.
const codec_detail::KernelTable& kernels_for(const RecordLayout& layout, CodecImpl impl) {
  if (impl == CodecImpl::kAuto) impl = best_codec_impl();
  HIQ_CHECK_MSG(codec_impl_supported(impl), "codec implementation not supported on this CPU");
  // Vector paths work on 16 (AVX-512) or 8 (AVX2) elements at a time within a head.
  const int dim = layout.shape.head_dim;
  if (impl == CodecImpl::kAvx512 && dim % 16 == 0) return *codec_detail::avx512_kernels();
  if ((impl == CodecImpl::kAvx512 || impl == CodecImpl::kAvx2) && dim % 8 == 0) return *codec_detail::avx2_kernels();
  return codec_detail::scalar_kernels();
}

}  // namespace

void encode_rows(const RecordLayout& layout, const uint16_t* src, size_t src_row_stride, size_t num_rows,
                 std::byte* dst, CodecStats* stats, CodecImpl impl) {
  HIQ_CHECK_MSG(layout.is_valid(), "encode_rows: record layout not built by RecordLayout::make");
  HIQ_CHECK(src_row_stride >= layout.shape.elements() || num_rows <= 1);
  const DefaultFloatEnvironment float_environment;
  const auto encode = kernels_for(layout, impl).encode[codec_detail::codec_index(layout.codec)];
  CodecStats local;
  for (size_t r = 0; r < num_rows; ++r)
    encode(layout, src + r * src_row_stride, dst + r * layout.record_bytes, local);
  local.rows += num_rows;
  if (stats) *stats += local;
}

void decode_rows(const RecordLayout& layout, const std::byte* src, size_t num_rows, uint16_t* dst,
                 size_t dst_row_stride, CodecImpl impl) {
  HIQ_CHECK_MSG(layout.is_valid(), "decode_rows: record layout not built by RecordLayout::make");
  HIQ_CHECK(dst_row_stride >= layout.shape.elements() || num_rows <= 1);
  const DefaultFloatEnvironment float_environment;
  const auto decode = kernels_for(layout, impl).decode[codec_detail::codec_index(layout.codec)];
  for (size_t r = 0; r < num_rows; ++r) decode(layout, src + r * layout.record_bytes, dst + r * dst_row_stride);
}

void transcode_rows(const RecordLayout& from, const std::byte* src, size_t src_stride, const RecordLayout& to,
                    std::byte* dst, size_t dst_stride, size_t n, CodecStats* stats, CodecImpl impl) {
  HIQ_CHECK_MSG(from.is_valid() && to.is_valid(), "transcode_rows: record layout not built by RecordLayout::make");
  HIQ_CHECK_MSG(from.shape == to.shape, "transcode_rows: the two layouts have different row shapes");
  const size_t src_step = src_stride != 0 ? src_stride : from.record_bytes;
  const size_t dst_step = dst_stride != 0 ? dst_stride : to.record_bytes;
  HIQ_CHECK(src_step >= from.record_bytes && dst_step >= to.record_bytes);
  const DefaultFloatEnvironment float_environment;
  const auto decode = kernels_for(from, impl).decode[codec_detail::codec_index(from.codec)];
  const auto encode = kernels_for(to, impl).encode[codec_detail::codec_index(to.codec)];
  thread_local std::vector<uint16_t> row;  // one BF16 row between the two codecs
  row.resize(from.shape.elements());
  CodecStats local;
  for (size_t i = 0; i < n; ++i) {
    decode(from, src + i * src_step, row.data());
    encode(to, row.data(), dst + i * dst_step, local);
  }
  local.rows += n;
  if (stats) *stats += local;
}

void encode_rows_indexed(const RecordLayout& layout, const uint16_t* src_plane, std::span<const uint32_t> src_rows,
                         std::byte* dst_plane, std::span<const uint32_t> dst_records, CodecStats* stats,
                         CodecImpl impl, size_t record_stride) {
  HIQ_CHECK_MSG(layout.is_valid(), "encode_rows_indexed: record layout not built by RecordLayout::make");
  HIQ_CHECK(src_rows.size() == dst_records.size());
  const DefaultFloatEnvironment float_environment;
  const auto encode = kernels_for(layout, impl).encode[codec_detail::codec_index(layout.codec)];
  const size_t row = layout.shape.elements();
  const size_t stride = record_stride != 0 ? record_stride : layout.record_bytes;
  CodecStats local;
  for (size_t i = 0; i < src_rows.size(); ++i)
    encode(layout, src_plane + src_rows[i] * row, dst_plane + dst_records[i] * stride, local);
  local.rows += src_rows.size();
  if (stats) *stats += local;
}

void decode_rows_indexed(const RecordLayout& layout, const std::byte* src_plane, std::span<const uint32_t> src_records,
                         uint16_t* dst_plane, std::span<const uint32_t> dst_rows, CodecImpl impl,
                         size_t record_stride) {
  HIQ_CHECK_MSG(layout.is_valid(), "decode_rows_indexed: record layout not built by RecordLayout::make");
  HIQ_CHECK(src_records.size() == dst_rows.size());
  const DefaultFloatEnvironment float_environment;
  const auto decode = kernels_for(layout, impl).decode[codec_detail::codec_index(layout.codec)];
  const size_t row = layout.shape.elements();
  const size_t stride = record_stride != 0 ? record_stride : layout.record_bytes;
  for (size_t i = 0; i < src_records.size(); ++i)
    decode(layout, src_plane + src_records[i] * stride, dst_plane + dst_rows[i] * row);
}

namespace codec_detail {
#ifndef HIQ_HAVE_X86_SIMD
const KernelTable* avx2_kernels() { return nullptr; }
const KernelTable* avx512_kernels() { return nullptr; }
#endif

void zero_tail(const RecordLayout& layout, std::byte* record) {
  const size_t used = layout.used_bytes();
  // A gap byte between an odd-sized int4 payload and the scales is zeroed too.
  if (layout.num_scales && layout.scale_offset > layout.payload_bytes)
    record[layout.payload_bytes] = std::byte{0};
  std::memset(record + used, 0, layout.record_bytes - used);
}
}  // namespace codec_detail

}  // namespace hiq
