// memory/host_kv_pool.h — L2: the host-memory tier, holding KV as encoded records.
//
// One record per (slot, layer, K|V) in the pool's codec for that part
// (docs/formats.md), in one of two orders:
//
//   layer-major (the default), like L1:
//     [layer 0: K records of every slot | V records][layer 1: …] …
//     so restoring one layer of a run of slots reads one region;
//   token-major:
//     [slot 0: layer 0 K, layer 0 V, layer 1 K, …][slot 1: …] …
//     so a token's bytes_per_token are one contiguous run, whatever its
//     codec: the order a region shared by tokens of different codecs needs.
//
// Either way a record lies at plane(layer, part) + slot × record_stride(part);
// the transfer engines address records only so. Capacity is computed from
// the *encoded* bytes per token: a smaller codec holds more tokens in the
// same budget. The whole budget is reserved (and its pages touched) at
// creation, so a budget the machine cannot hold fails then.
#pragma once

#include <cstdint>
#include <memory>

#include "codec/codec.h"
#include "core/status.h"
#include "kv/geometry.h"
#include "memory/mapped_region.h"
#include "memory/slot_allocator.h"

namespace hiq {

enum class RecordOrder : uint8_t {
  kLayerMajor,  // a (layer, part) plane of every slot's records after another
  kTokenMajor,  // every record of a slot together
};

struct HostKvPoolOptions {
  KvCodecs codec = CodecKind::kBf16;           // --hicache-codec: one codec, or one for K and one for V
  size_t record_align = kDefaultRecordAlign;   // --record-align
  uint64_t size_bytes = 0;                     // --hicache-size; 0: size from `ratio`
  uint64_t capacity_tokens = 0;                // --hicache-tokens: a capacity in tokens, whatever the codec's
                                               // record size (equal-capacity comparisons); overrides both above
  double ratio = 2.0;                          // --hicache-ratio: L2 tokens per L1 token (SGLang's default)
  bool populate = true;                        // touch every page at creation
  RecordOrder record_order = RecordOrder::kLayerMajor;
};

class HostKvPool {
 public:
  // Sizes the pool from options.capacity_tokens, else options.size_bytes,
  // else options.ratio × `l1_tokens`, in whole pages of the geometry. Errors: a geometry or codec
  // the record formats cannot take (e.g. int4h on head_dim 96), a budget too
  // small for one page, a ratio that is not positive, or memory the machine
  // does not have.
  static Result<std::unique_ptr<HostKvPool>> create(const KvGeometry& geometry, const HostKvPoolOptions& options,
                                                   size_t l1_tokens);

  const KvGeometry& geometry() const { return geometry_; }
  KvCodecs codec() const { return codec_; }
  const RecordLayout& layout(KvPart part) const { return part == KvPart::kK ? k_layout_ : v_layout_; }
  size_t capacity_tokens() const { return capacity_tokens_; }
  // Encoded bytes of one token: every layer's K and V record, padding included.
  size_t bytes_per_token() const { return bytes_per_token_; }
  size_t reserved_bytes() const { return memory_.size(); }

  SlotAllocator& allocator() { return allocator_; }
  const SlotAllocator& allocator() const { return allocator_; }

  RecordOrder record_order() const { return order_; }
  // Slot 0's record of (layer, part); slot s's is record_stride(part) bytes
  // further per slot.
  std::byte* plane(int layer, KvPart part);
  size_t record_stride(KvPart part) const {
    return order_ == RecordOrder::kTokenMajor ? bytes_per_token_ : layout(part).record_bytes;
  }
  std::byte* record(int layer, KvPart part, SlotId slot) {
    return plane(layer, part) + size_t{slot} * record_stride(part);
  }

 private:
  HostKvPool(const KvGeometry& geometry, KvCodecs codec, RecordLayout k, RecordLayout v, size_t capacity,
             RecordOrder order, MappedRegion memory);

  KvGeometry geometry_;
  KvCodecs codec_;
  RecordLayout k_layout_, v_layout_;  // v_layout_ is unused (and empty) for MLA
  size_t capacity_tokens_;
  size_t bytes_per_token_;
  RecordOrder order_;
  MappedRegion memory_;
  SlotAllocator allocator_;
};

}  // namespace hiq
