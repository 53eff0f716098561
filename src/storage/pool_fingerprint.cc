// The fingerprint and page size of KV as a HostKvPool holds it. Apart from
// storage_key.cc, which needs no codec (the value fuzzer links that alone).
#include "storage/storage_key.h"

namespace hiq {

StorageFingerprint make_storage_fingerprint(const KvGeometry& geometry, KvCodecs codec, size_t record_align,
                                            int block_tokens, std::string model, int tp_rank) {
  StorageFingerprint fp;
  fp.model = std::move(model);
  fp.codec = codec.name();
  fp.format_version = kRecordFormatVersion;
  fp.layers = geometry.num_layers;
  fp.kv_heads = geometry.num_kv_heads;
  fp.head_dim = geometry.k_head_dim;
  fp.v_head_dim = geometry.attention == AttentionKind::kMla ? 0 : geometry.v_head_dim;
  fp.tp_rank = tp_rank;
  fp.tp_size = geometry.tp_size;
  fp.block_tokens = block_tokens;
  fp.record_align = record_align;
  fp.l1_dtype = std::string(l1_dtype_name(geometry.l1_dtype));
  return fp;
}

Result<size_t> storage_page_bytes(const StorageFingerprint& fp) {
  HIQ_RETURN_IF_ERROR(fp.validate());
  HIQ_ASSIGN_OR_RETURN(const KvCodecs codec, parse_kv_codecs(fp.codec));
  HIQ_ASSIGN_OR_RETURN(const RecordLayout k, RecordLayout::make(codec.k, {fp.kv_heads, fp.head_dim}, fp.record_align));
  size_t per_layer = k.record_bytes;
  if (fp.v_head_dim > 0) {
    HIQ_ASSIGN_OR_RETURN(const RecordLayout v,
                         RecordLayout::make(codec.v, {fp.kv_heads, fp.v_head_dim}, fp.record_align));
    per_layer += v.record_bytes;
  }
  return per_layer * static_cast<size_t>(fp.layers) * static_cast<size_t>(fp.block_tokens);
}

}  // namespace hiq
