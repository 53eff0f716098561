// kv/geometry.h — the shape of a model's KV cache as one tensor-parallel rank
// holds it. Every size in HiQCache (L1 slots, L2 records, bytes per token,
// capacities) derives from a KvGeometry.
//
// A token's KV is a set of *rows*: for each layer, one K row and (for MHA/GQA)
// one V row. A row is `num_kv_heads × head_dim` elements of the L1 dtype. MLA
// models (DeepSeek-V2/V3) cache one latent "head" of kv_lora_rank + rope dims
// per layer and no V row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace hiq {

// Element type of the device (L1) KV pool.
enum class L1Dtype : uint8_t { kBf16, kFp16 };
std::string_view l1_dtype_name(L1Dtype dtype);
inline constexpr size_t l1_dtype_bytes(L1Dtype) { return 2; }

enum class AttentionKind : uint8_t {
  kMha,  // multi-head / grouped-query attention: a K row and a V row per layer
  kMla,  // multi-head latent attention: one compressed latent row per layer (K only)
};
std::string_view attention_kind_name(AttentionKind kind);

enum class KvPart : uint8_t { kK = 0, kV = 1 };

// The shape of one row: `num_heads` vectors of `head_dim` elements, contiguous.
struct RowShape {
  int num_heads = 0;
  int head_dim = 0;
  constexpr size_t elements() const { return static_cast<size_t>(num_heads) * static_cast<size_t>(head_dim); }
  bool operator==(const RowShape&) const = default;
};

inline constexpr int kMaxPageSize = 1 << 20;

struct KvGeometry {
  std::string name;                        // for reports: preset name or config path
  int num_layers = 0;                      // attention layers that cache KV
  int num_kv_heads = 0;                    // KV heads held by one TP rank (1 for MLA)
  int k_head_dim = 0;                      // K head dim (MLA: kv_lora_rank + qk_rope_head_dim)
  int v_head_dim = 0;                      // V head dim; 0 for MLA, which caches no V row
  int page_size = 1;                       // tokens per L1 page (SGLang --page-size), ≤ kMaxPageSize
  L1Dtype l1_dtype = L1Dtype::kBf16;       // element type of the L1 pool
  AttentionKind attention = AttentionKind::kMha;
  int tp_size = 1;                         // tensor-parallel ranks the heads were split over
  int total_kv_heads = 0;                  // KV heads of the whole model, before the TP split

  // Number of rows per layer: 2 (K, V) for MHA, 1 for MLA.
  int rows_per_layer() const { return attention == AttentionKind::kMla ? 1 : 2; }
  RowShape row_shape(KvPart part) const;
  // Bytes of one token's KV in L1 (all layers, K and V, unpadded): the BF16/FP16
  // host pool of SGLang HiCache stores exactly this much per token.
  size_t l1_bytes_per_token() const;

  // Checks every field and their consistency; the error names the field.
  Status validate() const;
};

}  // namespace hiq
