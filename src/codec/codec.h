// codec/codec.h — record formats of the L2 (host) tier and their CPU codecs.
//
// The unit of encoding is one *row*: the KV of one token in one layer, K or V,
// `num_heads × head_dim` BF16 elements. A row encodes to one *record*:
//
//   [ payload | scales (bf16, little-endian) | zero padding to record_align ]
//
// docs/formats.md gives every format byte by byte. The formats are the contract
// between the CPU codecs here and the GPU kernels: an encoder produces the same
// bytes on every implementation (scalar reference, AVX2, CUDA) and a decoder the
// same BF16 values.
//
// Non-finite input. A head (for int4/int4h: every group of the head) that holds
// a NaN or ±Inf is encoded with NaN scales and zero codes, so the whole head
// decodes to NaN: it can never come back as finite numbers. `bf16` keeps such
// values exactly. Either way the encoder counts the head in
// `CodecStats::nonfinite_heads`. int4h also marks heads whose magnitude is too
// large to rotate safely (max |x| ≥ 2^64, never seen in real KV) the same way
// and counts them in `out_of_range_heads`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "kv/geometry.h"

namespace hiq {

enum class CodecKind : uint8_t {
  kBf16 = 0,   // identity: the L1 row as it is
  kInt8 = 1,   // symmetric int8, one bf16 scale per head
  kFp8 = 2,    // FP8 E4M3 (saturating), one bf16 scale per head
  kInt4 = 3,   // symmetric int4 per group of 32 along head_dim, two per byte
  kInt4H = 4,  // int4 of the head vector after an orthonormal Walsh–Hadamard rotation
};
inline constexpr CodecKind kAllCodecs[] = {CodecKind::kBf16, CodecKind::kInt8, CodecKind::kFp8,
                                           CodecKind::kInt4, CodecKind::kInt4H};

std::string_view codec_name(CodecKind codec);
// Accepts the names of codec_name ("bf16", "int8", "fp8", "int4", "int4h").
Result<CodecKind> parse_codec(std::string_view name);
// Bits of one encoded value, scales aside: 16, 8 or 4. A ladder of host
// codecs descends in it.
constexpr int codec_value_bits(CodecKind codec) {
  switch (codec) {
    case CodecKind::kBf16: return 16;
    case CodecKind::kInt8:
    case CodecKind::kFp8: return 8;
    case CodecKind::kInt4:
    case CodecKind::kInt4H: return 4;
  }
  return 16;
}

// The codecs of a host tier: one for keys, one for values. Keys are more
// sensitive to quantisation than values (they pass through the softmax's
// exponent), so a tier may keep them at a finer codec. Built implicitly from
// one codec: both parts use it. MLA has no V rows; its `v` is ignored.
struct KvCodecs {
  CodecKind k = CodecKind::kBf16;
  CodecKind v = CodecKind::kBf16;

  constexpr KvCodecs() = default;
  constexpr KvCodecs(CodecKind both) : k(both), v(both) {}  // NOLINT(google-explicit-constructor): one codec is both
  constexpr KvCodecs(CodecKind key, CodecKind value) : k(key), v(value) {}

  constexpr CodecKind of(KvPart part) const { return part == KvPart::kK ? k : v; }
  constexpr bool split() const { return k != v; }
  constexpr bool operator==(const KvCodecs&) const = default;
  // "int8" when both are int8; "k=int8,v=int4h" when they differ.
  std::string name() const;
};
// Accepts "int8" (both parts) and "k=int8,v=int4h" (either order; a part not
// named keeps the other's codec, so "k=int8" alone is int8 for both).
Result<KvCodecs> parse_kv_codecs(std::string_view spec);

// Bumped whenever any record layout changes; stored by tiers that persist records.
inline constexpr uint32_t kRecordFormatVersion = 1;
inline constexpr size_t kDefaultRecordAlign = 16;
inline constexpr size_t kMaxRecordAlign = 4096;
inline constexpr int kInt4GroupSize = 32;
inline constexpr int kMaxHeadDim = 1024;
inline constexpr size_t kMaxRowElements = size_t{1} << 26;  // keeps every in-row index an int

// Where each part of a record lies (docs/formats.md).
struct RecordLayout {
  CodecKind codec = CodecKind::kBf16;
  RowShape shape;
  size_t record_align = kDefaultRecordAlign;
  int groups_per_head = 0;     // scales per head: 0 (bf16), 1 (int8, fp8), ceil(head_dim/32) (int4, int4h)
  size_t payload_bytes = 0;    // codes, at offset 0
  size_t scale_offset = 0;     // first bf16 scale: payload_bytes rounded up to 2
  size_t num_scales = 0;       // num_heads × groups_per_head
  size_t record_bytes = 0;     // whole record: a multiple of record_align

  constexpr size_t scale_bytes() const { return num_scales * 2; }
  constexpr size_t used_bytes() const { return num_scales ? scale_offset + scale_bytes() : payload_bytes; }
  constexpr size_t padding_bytes() const { return record_bytes - used_bytes(); }

  // Errors: a row shape that is empty, has head_dim > kMaxHeadDim or more than
  // kMaxRowElements elements, a record_align that is not a power of two in
  // [1, 4096], int4h with a head_dim that is not a power of two.
  static Result<RecordLayout> make(CodecKind codec, RowShape shape, size_t record_align = kDefaultRecordAlign);

  // True when make() would have built exactly this layout. encode_rows and
  // decode_rows check it, since the fields are public.
  bool is_valid() const;
  bool operator==(const RecordLayout&) const = default;

  // The arithmetic of make() without its checks: for arguments make() accepts.
  static constexpr RecordLayout compute(CodecKind codec, RowShape shape, size_t record_align) {
    RecordLayout l;
    l.codec = codec;
    l.shape = shape;
    l.record_align = record_align;
    const size_t elements = shape.elements();
    switch (codec) {
      case CodecKind::kBf16:
        l.groups_per_head = 0;
        l.payload_bytes = 2 * elements;
        break;
      case CodecKind::kInt8:
      case CodecKind::kFp8:
        l.groups_per_head = 1;
        l.payload_bytes = elements;
        break;
      case CodecKind::kInt4:
      case CodecKind::kInt4H:
        l.groups_per_head = (shape.head_dim + kInt4GroupSize - 1) / kInt4GroupSize;
        l.payload_bytes = (elements + 1) / 2;
        break;
    }
    l.num_scales = static_cast<size_t>(shape.num_heads) * static_cast<size_t>(l.groups_per_head);
    l.scale_offset = (l.payload_bytes + 1) & ~size_t{1};
    l.record_bytes = (l.used_bytes() + record_align - 1) / record_align * record_align;
    return l;
  }
};

// The record sizes docs/formats.md quotes for Qwen3-8B rows (8 KV heads × 128)
// and the DeepSeek-V3 latent row (1 × 576), checked at compile time.
static_assert(RecordLayout::compute(CodecKind::kBf16, {8, 128}, 16).record_bytes == 2048);
static_assert(RecordLayout::compute(CodecKind::kInt8, {8, 128}, 16).record_bytes == 1040);
static_assert(RecordLayout::compute(CodecKind::kInt8, {8, 128}, 128).record_bytes == 1152);
static_assert(RecordLayout::compute(CodecKind::kFp8, {8, 128}, 16).record_bytes == 1040);
static_assert(RecordLayout::compute(CodecKind::kInt4, {8, 128}, 16).record_bytes == 576);
static_assert(RecordLayout::compute(CodecKind::kInt4H, {8, 128}, 16).record_bytes == 576);
static_assert(RecordLayout::compute(CodecKind::kInt8, {1, 576}, 16).record_bytes == 592);
static_assert(RecordLayout::compute(CodecKind::kInt4, {1, 576}, 16).record_bytes == 336);

// Counters an encoder adds to; they feed the cache's metrics.
struct CodecStats {
  uint64_t rows = 0;                // rows encoded
  uint64_t nonfinite_heads = 0;     // heads holding NaN/±Inf (decode to NaN; bf16 keeps them)
  uint64_t out_of_range_heads = 0;  // int4h heads with max |x| ≥ 2^64 (decode to NaN)
  CodecStats& operator+=(const CodecStats& o) {
    rows += o.rows;
    nonfinite_heads += o.nonfinite_heads;
    out_of_range_heads += o.out_of_range_heads;
    return *this;
  }
};

// Which implementation runs. kAuto picks the widest the CPU supports. A vector
// implementation takes the heads it can (AVX-512: head_dim % 16 == 0, AVX2:
// head_dim % 8 == 0) and hands other shapes to the next narrower one, down to
// the scalar reference. All give identical bytes.
enum class CodecImpl : uint8_t { kAuto, kScalar, kAvx2, kAvx512 };
std::string_view codec_impl_name(CodecImpl impl);
bool codec_impl_supported(CodecImpl impl);  // by this CPU and build
CodecImpl best_codec_impl();                // what kAuto resolves to

// Both functions run in the default floating-point environment (round to
// nearest even, no flush-to-zero): they set it for the call and restore the
// caller's, so a library that enabled FTZ/DAZ cannot change their output. A
// layout that is not valid() is a programmer error (HIQ_CHECK).
//
// Encodes `num_rows` BF16 rows into consecutive records. Row r starts at
// `src + r * src_row_stride` (elements; ≥ shape.elements()); record r is written
// to `dst + r * layout.record_bytes`, padding zeroed. `stats` may be null.
void encode_rows(const RecordLayout& layout, const uint16_t* src, size_t src_row_stride, size_t num_rows,
                 std::byte* dst, CodecStats* stats = nullptr, CodecImpl impl = CodecImpl::kAuto);

// Decodes `num_rows` consecutive records into BF16 rows (row r at
// `dst + r * dst_row_stride`).
void decode_rows(const RecordLayout& layout, const std::byte* src, size_t num_rows, uint16_t* dst,
                 size_t dst_row_stride, CodecImpl impl = CodecImpl::kAuto);

// Re-encodes `n` records of layout `from` into records of layout `to` (both
// of one row shape), record i at src + i × src_stride into dst + i ×
// dst_stride (a stride of 0: the record size): the decode of `from`, then
// the encode of `to`, row by row through one BF16 row, so the output is
// byte-identical to decode_rows then encode_rows. Demotion's kernel
// (int8 → int4h) on the host, off the critical path.
void transcode_rows(const RecordLayout& from, const std::byte* src, size_t src_stride, const RecordLayout& to,
                    std::byte* dst, size_t dst_stride, size_t n, CodecStats* stats = nullptr,
                    CodecImpl impl = CodecImpl::kAuto);

// Gather/scatter forms for the transfer engine: row `src_rows[i]` of a plane of
// contiguous rows (`shape.elements()` each) is encoded into record
// `dst_records[i]` of a plane of records `record_stride` bytes apart (0: the
// record size, contiguous records), and back. The spans must have equal
// lengths. The stride may be less than a record (a tiered host pool
// addresses records by granule): the caller names records that do not
// overlap.
void encode_rows_indexed(const RecordLayout& layout, const uint16_t* src_plane, std::span<const uint32_t> src_rows,
                         std::byte* dst_plane, std::span<const uint32_t> dst_records, CodecStats* stats = nullptr,
                         CodecImpl impl = CodecImpl::kAuto, size_t record_stride = 0);
void decode_rows_indexed(const RecordLayout& layout, const std::byte* src_plane, std::span<const uint32_t> src_records,
                         uint16_t* dst_plane, std::span<const uint32_t> dst_rows, CodecImpl impl = CodecImpl::kAuto,
                         size_t record_stride = 0);

}  // namespace hiq
