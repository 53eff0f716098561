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
// Either way a record lies at plane(layer, part, rung) + slot ×
// record_stride(part); the transfer engines address records only so.
// Capacity is computed from the *encoded* bytes per token: a smaller codec
// holds more tokens in the same budget. The whole budget is reserved (and its
// pages touched) at creation, so a budget the machine cannot hold fails then.
//
// Precision tiers. A pool with a demotion ladder (`--hicache-codec
// tiered:int8,int4h`) holds tokens of several codecs, its rungs, in one
// region: rung 0 is the codec backups write, and the cache demotes cold
// nodes down the ladder instead of dropping them. Such a pool is token-major
// and counted in granules of one last-rung token; a token of rung r takes
// span(r) granules, its records then padding up to token_stride(r), and its
// slot is the first of them (memory/host_slot_allocator.h). Free runs are
// thus whole last-rung tokens: the rung at which a ladder drops never finds
// its free space in runs too short to use. record_stride() is one granule,
// and each slot's rung (rung_of) says which layout its records have: the
// engines group a transfer's slots by it. A pool of one codec is the case
// of one rung whose granule is a token.
//
// Tensor parallelism (CPU backend). Each rank keeps its own KV heads — its
// own L1 pool, of its rank's geometry — and its heads are backed up to and
// restored from records of its own: a rank's record has the layout of its
// KV heads (the same on every rank, since every rank holds as many), in the
// one codec of the pool. All ranks' records live in ONE pool, so that one
// radix tree and one slot allocator decide for every rank (a node's L2 slot
// is the same number on all of them, as its L1 slots are) and the capacity
// is computed from the bytes of every rank's records per token. The pool
// does this without knowing about ranks: its geometry (tp_host_geometry) is
// a rank's with tp_size × the layers, rank r's layer l being the pool's
// layer r·L + l — rank-major, each rank's records a run of "layers" of
// their own. Everything that walks the pool's layers (the transfer engine,
// demotion, the storage tier) thereby covers every rank; the CPU transfer
// engine built over the ranks' L1 pools (transfer_engine.h) maps a model
// layer to the ranks' record layers. The alternative, a HostKvPool per rank
// sharing one slot numbering, would need N allocators kept in lockstep and
// N capacities to agree; one pool has neither problem.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "codec/codec.h"
#include "core/status.h"
#include "kv/geometry.h"
#include "memory/mapped_region.h"
#include "memory/host_slot_allocator.h"

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
  RecordOrder record_order = RecordOrder::kLayerMajor;  // a pool with a ladder is always token-major
  // The rungs below `codec` that cold nodes are demoted to, in order, each
  // with fewer bits per value than the one before (`tiered:int8,int4h` is
  // codec int8 and demotion {int4h}); empty: one codec, no demotion. Sizes
  // by capacity_tokens or ratio count tokens of `codec`.
  std::vector<CodecKind> demotion;
};

// `--hicache-codec`: "int8", "k=int8,v=int4h", or a ladder "tiered:int8,int4h"
// ("tiered:bf16,int8,int4h"); fills options.codec and options.demotion.
Status parse_host_codec(std::string_view spec, HostKvPoolOptions& options);
// The spelling parse_host_codec reads back: "int8", "tiered:int8,int4h".
std::string host_codec_name(const HostKvPoolOptions& options);

// The region a token of each rung of a ladder takes, from the rungs' encoded
// bytes per token (the last the smallest): each rounded up to whole tokens of
// the last rung, the ladder pool's granule (HostKvPool::token_stride). One
// codec: its bytes. kInvalidArgument when a rung is smaller than the last,
// or takes no fewer bytes in the tier than the rung above it.
Result<std::vector<size_t>> ladder_token_strides(std::span<const size_t> bytes_per_token);

// The geometry of a host pool holding every tensor-parallel rank's records
// (see above): `rank`'s (one rank's KV heads; rank.tp_size ranks) with
// rank.tp_size × rank.num_layers layers. `rank` itself when tp_size is 1.
KvGeometry tp_host_geometry(const KvGeometry& rank);

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
  // Rungs: 1 for a pool of one codec.
  int rungs() const { return static_cast<int>(rungs_.size()); }
  bool tiered() const { return rungs() > 1; }
  KvCodecs codec(int rung = 0) const { return rung_(rung).codec; }
  // The --hicache-codec spelling: "int8", "k=int8,v=int4h", "tiered:int8,int4h".
  std::string codec_spec() const;
  const RecordLayout& layout(KvPart part, int rung = 0) const {
    return part == KvPart::kK ? rung_(rung).k : rung_(rung).v;
  }
  // Tokens the pool holds at rung 0 (a tiered pool holds more once it demotes).
  size_t capacity_tokens() const { return capacity_tokens_; }
  // Slot ids are below this (granules; tokens for a pool of one codec).
  size_t num_slots() const { return slots_.granules(); }
  // Encoded bytes of one token of `rung`: every layer's K and V record, record padding included.
  size_t bytes_per_token(int rung = 0) const { return rung_(rung).bytes_per_token; }
  // The region a token of `rung` takes: span(rung) granules, bytes_per_token
  // and (a ladder's upper rungs) padding to the next granule. Slots of one
  // run of a rung are this far apart.
  size_t token_stride(int rung = 0) const { return size_t{span(rung)} * granule_bytes_; }
  uint32_t span(int rung = 0) const { return slots_.span(rung); }
  size_t granule_bytes() const { return granule_bytes_; }
  size_t reserved_bytes() const { return memory_.size(); }
  uint64_t free_bytes() const { return slots_.free_granules() * granule_bytes_; }

  // Slots (memory/host_slot_allocator.h). A pool of one codec has rung 0 only.
  Result<std::vector<SlotId>> allocate(size_t tokens, int rung = 0) { return slots_.allocate(tokens, rung); }
  Status free(std::span<const SlotId> slots) { return slots_.free(slots); }
  bool is_allocated(SlotId slot) const { return slots_.is_allocated(slot); }
  int rung_of(SlotId slot) const { return slots_.rung_of(slot); }
  size_t used_tokens() const { return slots_.used_tokens(); }
  size_t used_tokens(int rung) const { return slots_.used_tokens(rung); }
  size_t free_tokens(int rung = 0) const { return slots_.free_tokens(rung); }
  Status pin(std::span<const SlotId> slots) { return slots_.pin(slots); }
  Status unpin(std::span<const SlotId> slots) { return slots_.unpin(slots); }
  bool any_pinned(std::span<const SlotId> slots) const { return slots_.any_pinned(slots); }
  size_t released_pinned_count() const { return slots_.released_pinned_count(); }
  // Demotion: where each slot's records go at `to_rung`, then the commit
  // once they are there (HostSlotAllocator::compacted / shrink).
  std::vector<SlotId> demoted_slots(std::span<const SlotId> slots, int from_rung, int to_rung) const {
    return HostSlotAllocator::compacted(slots, slots_.span(from_rung), slots_.span(to_rung));
  }
  Status shrink(std::span<const SlotId> slots, int to_rung) { return slots_.shrink(slots, to_rung); }
  Status check_slots() const { return slots_.check(); }

  RecordOrder record_order() const { return order_; }
  // Slot 0's record of (layer, part) at `rung`; slot s's is record_stride(part)
  // bytes further per slot.
  std::byte* plane(int layer, KvPart part, int rung = 0);
  size_t record_stride(KvPart part) const {
    return order_ == RecordOrder::kTokenMajor ? granule_bytes_ : layout(part).record_bytes;
  }
  std::byte* record(int layer, KvPart part, SlotId slot, int rung = 0) {
    return plane(layer, part, rung) + size_t{slot} * record_stride(part);
  }

 private:
  struct Rung {
    KvCodecs codec;
    RecordLayout k, v;  // v is unused (and empty) for MLA
    size_t bytes_per_token = 0;
  };
  HostKvPool(const KvGeometry& geometry, std::vector<Rung> rungs, std::vector<uint32_t> spans, size_t capacity,
             size_t granules, size_t granule_bytes, RecordOrder order, MappedRegion memory);
  const Rung& rung_(int rung) const { return rungs_[static_cast<size_t>(rung)]; }

  KvGeometry geometry_;
  std::vector<Rung> rungs_;
  size_t capacity_tokens_;
  size_t granule_bytes_;
  RecordOrder order_;
  MappedRegion memory_;
  HostSlotAllocator slots_;
};

}  // namespace hiq
