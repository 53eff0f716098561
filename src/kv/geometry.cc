#include "kv/geometry.h"

#include <cstdint>

namespace hiq {

std::string_view l1_dtype_name(L1Dtype dtype) {
  switch (dtype) {
    case L1Dtype::kBf16: return "bf16";
    case L1Dtype::kFp16: return "fp16";
  }
  return "?";
}

std::string_view attention_kind_name(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kMha: return "mha";
    case AttentionKind::kMla: return "mla";
  }
  return "?";
}

RowShape KvGeometry::row_shape(KvPart part) const {
  if (part == KvPart::kK) return {num_kv_heads, k_head_dim};
  return {attention == AttentionKind::kMla ? 0 : num_kv_heads, v_head_dim};
}

size_t KvGeometry::l1_bytes_per_token() const {
  size_t elements = row_shape(KvPart::kK).elements();
  if (attention == AttentionKind::kMha) elements += row_shape(KvPart::kV).elements();
  return elements * l1_dtype_bytes(l1_dtype) * static_cast<size_t>(num_layers);
}

Status KvGeometry::validate() const {
  const auto positive = [](int v, std::string_view field) -> Status {
    if (v > 0) return Status::ok();
    return invalid_argument("KV geometry: '" + std::string(field) + "' must be positive (got " +
                            std::to_string(v) + ")");
  };
  HIQ_RETURN_IF_ERROR(positive(num_layers, "num_layers"));
  HIQ_RETURN_IF_ERROR(positive(num_kv_heads, "num_kv_heads"));
  HIQ_RETURN_IF_ERROR(positive(k_head_dim, "k_head_dim"));
  HIQ_RETURN_IF_ERROR(positive(page_size, "page_size"));
  HIQ_RETURN_IF_ERROR(positive(tp_size, "tp_size"));
  if (page_size > kMaxPageSize)
    return out_of_range("KV geometry: 'page_size' " + std::to_string(page_size) + " exceeds " +
                        std::to_string(kMaxPageSize));
  if (attention == AttentionKind::kMha) {
    HIQ_RETURN_IF_ERROR(positive(v_head_dim, "v_head_dim"));
  } else {
    if (num_kv_heads != 1)
      return invalid_argument("KV geometry: an MLA model caches one latent head, not " +
                              std::to_string(num_kv_heads));
    if (v_head_dim != 0)
      return invalid_argument("KV geometry: an MLA model caches no V row ('v_head_dim' must be 0)");
  }
  HIQ_RETURN_IF_ERROR(positive(total_kv_heads, "total_kv_heads"));
  // Heads are split over TP ranks, or (more ranks than heads) each rank holds one replica.
  const bool split = int64_t{num_kv_heads} * tp_size == total_kv_heads;
  const bool replicated = num_kv_heads == 1 && tp_size % total_kv_heads == 0;
  if (!split && !replicated)
    return invalid_argument("KV geometry: " + std::to_string(num_kv_heads) + " KV heads per rank × tp " +
                            std::to_string(tp_size) + " does not match total_kv_heads " +
                            std::to_string(total_kv_heads));
  return Status::ok();
}

}  // namespace hiq
