#include "memory/host_kv_pool.h"

#include <cmath>
#include <limits>
#include <string>

#include "core/check.h"
#include "core/units.h"

namespace hiq {

HostKvPool::HostKvPool(const KvGeometry& geometry, KvCodecs codec, RecordLayout k, RecordLayout v, size_t capacity,
                       RecordOrder order, MappedRegion memory)
    : geometry_(geometry),
      codec_(codec),
      k_layout_(k),
      v_layout_(v),
      capacity_tokens_(capacity),
      bytes_per_token_((k.record_bytes + v.record_bytes) * static_cast<size_t>(geometry.num_layers)),
      order_(order),
      memory_(std::move(memory)),
      allocator_(capacity) {}

Result<std::unique_ptr<HostKvPool>> HostKvPool::create(const KvGeometry& geometry, const HostKvPoolOptions& options,
                                                     size_t l1_tokens) {
  HIQ_RETURN_IF_ERROR(geometry.validate());
  // The codecs read and write BF16 rows; an FP16 L1 can only be copied as it is.
  if (geometry.l1_dtype != L1Dtype::kBf16 && options.codec != KvCodecs(CodecKind::kBf16))
    return invalid_argument("--hicache-codec " + options.codec.name() +
                            " needs a BF16 L1; this model's L1 is " + std::string(l1_dtype_name(geometry.l1_dtype)) +
                            " (use --hicache-codec bf16, which copies rows unchanged)");
  HIQ_ASSIGN_OR_RETURN(RecordLayout k, RecordLayout::make(options.codec.k, geometry.row_shape(KvPart::kK),
                                                          options.record_align));
  RecordLayout v{};  // MLA: no V records
  if (geometry.attention == AttentionKind::kMha) {
    HIQ_ASSIGN_OR_RETURN(v, RecordLayout::make(options.codec.v, geometry.row_shape(KvPart::kV), options.record_align));
  }
  const uint64_t bytes_per_token = (k.record_bytes + v.record_bytes) * static_cast<uint64_t>(geometry.num_layers);
  const auto page = static_cast<uint64_t>(geometry.page_size);

  uint64_t tokens = 0;
  if (options.capacity_tokens > 0) {
    tokens = options.capacity_tokens / page * page;
    if (tokens == 0)
      return invalid_argument("--hicache-tokens " + std::to_string(options.capacity_tokens) + " is less than one page of " +
                              std::to_string(page) + " tokens");
  } else if (options.size_bytes > 0) {
    tokens = options.size_bytes / bytes_per_token / page * page;
    if (tokens == 0)
      return invalid_argument("--hicache-size " + format_bytes(options.size_bytes) + " holds no page of " +
                              std::to_string(page) + " token(s) at " + format_count(bytes_per_token) +
                              " B/token (" + options.codec.name() + ")");
  } else {
    if (!(options.ratio > 0) || !std::isfinite(options.ratio))
      return invalid_argument("--hicache-ratio must be a positive number (got " + std::to_string(options.ratio) + ")");
    tokens = static_cast<uint64_t>(options.ratio * static_cast<double>(l1_tokens)) / page * page;
    if (tokens == 0)
      return invalid_argument("--hicache-ratio " + std::to_string(options.ratio) + " of " + std::to_string(l1_tokens) +
                              " L1 tokens is less than one page");
  }
  if (tokens > std::numeric_limits<SlotId>::max())
    return out_of_range("the host tier would hold " + format_count(tokens) + " tokens, more than 2^32-1 slots");

  HIQ_ASSIGN_OR_RETURN(MappedRegion memory, MappedRegion::reserve(tokens * bytes_per_token, options.populate));
  return std::unique_ptr<HostKvPool>(new HostKvPool(geometry, options.codec, k, v, tokens, options.record_order, std::move(memory)));
}

std::byte* HostKvPool::plane(int layer, KvPart part) {
  HIQ_DCHECK(layer >= 0 && layer < geometry_.num_layers);
  HIQ_DCHECK(part == KvPart::kK || geometry_.attention == AttentionKind::kMha);
  if (order_ == RecordOrder::kTokenMajor)
    return memory_.data() + static_cast<size_t>(layer) * (k_layout_.record_bytes + v_layout_.record_bytes) +
           (part == KvPart::kV ? k_layout_.record_bytes : 0);
  const size_t k_plane = capacity_tokens_ * k_layout_.record_bytes;
  const size_t v_plane = capacity_tokens_ * v_layout_.record_bytes;
  return memory_.data() + static_cast<size_t>(layer) * (k_plane + v_plane) + (part == KvPart::kV ? k_plane : 0);
}

}  // namespace hiq
