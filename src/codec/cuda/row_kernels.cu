#include "codec/cuda/row_kernels.h"

#include <algorithm>
#include <string>

#include "codec/cuda/row_codec.cuh"
#include "cuda/check.cuh"

namespace hiq::cuda {
namespace {

constexpr int kMaxWarpsPerBlock = 32;

struct DevicePlane {
  uint16_t* rows;
  size_t rows_layer_stride;
  std::byte* records;
  size_t records_layer_stride;
  size_t records_slot_stride;
  DeviceLayout layout;
};

struct DeviceBatch {
  DevicePlane parts[2];
  int num_parts;
  const uint32_t* l1_rows;
  const uint32_t* records;
  uint32_t count;
  int first_layer, num_layers;
  unsigned long long* counters;
  unsigned scratch_bytes_per_warp;
};

DeviceLayout device_layout(const RecordLayout& r) {
  DeviceLayout l;
  l.codec = r.codec;
  l.heads = r.shape.num_heads;
  l.dim = r.shape.head_dim;
  l.elements = static_cast<int>(r.shape.elements());
  l.groups_per_head = r.groups_per_head;
  l.num_scales = static_cast<int>(r.num_scales);
  l.payload_bytes = static_cast<int>(r.payload_bytes);
  l.scale_offset = static_cast<int>(r.scale_offset);
  l.used_bytes = static_cast<int>(r.used_bytes());
  l.record_bytes = static_cast<int>(r.record_bytes);
  l.hadamard_norm = r.codec == CodecKind::kInt4H ? numeric::hadamard_norm(l.dim) : 0.0f;
  l.vector_rows = l.dim % 8 == 0;
  l.vector_records = r.record_bytes % 16 == 0;
  const bool per_head = r.codec == CodecKind::kInt8 || r.codec == CodecKind::kFp8;
  if (l.vector_rows && (per_head || l.dim % kInt4GroupSize == 0))
    l.lanes_per_group = (per_head ? l.dim : kInt4GroupSize) / 8;
  if (const int k = l.dim / 32; l.dim % 32 == 0 && k <= 32 && (k & (k - 1)) == 0) l.lanes_per_head = k;
  if (r.codec == CodecKind::kInt4H && (l.dim == 64 || l.dim == 128 || l.dim == 256)) l.fwht_per_lane = l.dim / 32;
  return l;
}

// Warp w of the grid takes rows w, w + (all warps), …; row r is (layer, part,
// i) with i fastest, so the rows of a layer are taken before the next layer's.
template <CodecKind kCodec, Direction kDirection>
__global__ void __launch_bounds__(kMaxWarpsPerBlock * 32, 1) rows_kernel(const DeviceBatch b) {
  extern __shared__ uint4 shared[];
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  auto* scratch = reinterpret_cast<uint8_t*>(shared) + static_cast<size_t>(warp) * b.scratch_bytes_per_warp;
  device::EncodeCounts counts;
  const size_t warps = size_t{gridDim.x} * (blockDim.x / 32);
  const size_t total = size_t{b.count} * static_cast<size_t>(b.num_parts) * static_cast<size_t>(b.num_layers);
  for (size_t r = size_t{blockIdx.x} * (blockDim.x / 32) + static_cast<size_t>(warp); r < total; r += warps) {
    const size_t i = r % b.count, rest = r / b.count;
    const DevicePlane& p = b.parts[rest % static_cast<size_t>(b.num_parts)];
    const size_t layer = static_cast<size_t>(b.first_layer) + rest / static_cast<size_t>(b.num_parts);
    uint16_t* row =
        p.rows + layer * p.rows_layer_stride + size_t{b.l1_rows[i]} * static_cast<size_t>(p.layout.elements);
    std::byte* record = p.records + layer * p.records_layer_stride + size_t{b.records[i]} * p.records_slot_stride;
    uint8_t* work = scratch + round16(static_cast<size_t>(p.layout.record_bytes));
    if constexpr (kDirection == Direction::kEncode) {
      device::encode_row<kCodec>(p.layout, row, record, scratch, work, counts, lane);
    } else {
      device::decode_row<kCodec>(p.layout, record, row, scratch, work, lane);
    }
  }
  if constexpr (kDirection == Direction::kEncode) {
    // Every warp leaves the loop together: its rows depend on the warp alone.
    const unsigned nonfinite = __reduce_add_sync(device::kFullMask, counts.nonfinite_heads);
    const unsigned out_of_range = __reduce_add_sync(device::kFullMask, counts.out_of_range_heads);
    if (lane == 0 && b.counters && (nonfinite | out_of_range)) {
      atomicAdd(&b.counters[0], static_cast<unsigned long long>(nonfinite));
      atomicAdd(&b.counters[1], static_cast<unsigned long long>(out_of_range));
    }
  }
}

template <CodecKind kCodec, Direction kDirection>
Status launch(const DeviceBatch& batch, const KernelShape& shape, int blocks, cudaStream_t stream) {
  auto* kernel = rows_kernel<kCodec, kDirection>;
  if (shape.shared_bytes > 48 * 1024) {
    HIQ_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  static_cast<int>(shape.shared_bytes)));
  }
  kernel<<<blocks, shape.warps_per_block * 32, shape.shared_bytes, stream>>>(batch);
  return cuda_status(cudaGetLastError(), "rows_kernel launch");
}

template <Direction kDirection>
Status dispatch(CodecKind codec, const DeviceBatch& batch, const KernelShape& shape, int blocks,
                cudaStream_t stream) {
  switch (codec) {  // the one codec switch of the GPU path
    case CodecKind::kBf16: return launch<CodecKind::kBf16, kDirection>(batch, shape, blocks, stream);
    case CodecKind::kInt8: return launch<CodecKind::kInt8, kDirection>(batch, shape, blocks, stream);
    case CodecKind::kFp8: return launch<CodecKind::kFp8, kDirection>(batch, shape, blocks, stream);
    case CodecKind::kInt4: return launch<CodecKind::kInt4, kDirection>(batch, shape, blocks, stream);
    case CodecKind::kInt4H: return launch<CodecKind::kInt4H, kDirection>(batch, shape, blocks, stream);
  }
  return invalid_argument("unknown codec");
}

size_t scratch_bytes(const RecordLayout& layout, Direction direction) {
  return warp_scratch_bytes(device_layout(layout), direction == Direction::kEncode);
}

}  // namespace

Result<KernelShape> kernel_shape(Direction direction, const RecordLayout* layouts, int num_layouts) {
  if (num_layouts < 1) return invalid_argument("kernel_shape: no layouts");
  size_t per_warp = 16;
  for (int i = 0; i < num_layouts; ++i) {
    if (!layouts[i].is_valid()) return invalid_argument("kernel_shape: an invalid record layout");
    per_warp = std::max(per_warp, scratch_bytes(layouts[i], direction));
  }
  int device = 0, optin = 0;
  HIQ_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  HIQ_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const size_t warps = std::min<size_t>(kMaxWarpsPerBlock, static_cast<size_t>(optin) / per_warp);
  if (warps == 0)
    return invalid_argument("a row needs " + std::to_string(per_warp) +
                            " bytes of GPU shared memory to encode, more than a block may have (" +
                            std::to_string(optin) + ")");
  return KernelShape{direction, static_cast<int>(warps), warps * per_warp};
}

Status launch_rows(Direction direction, const RowBatch& batch, const KernelShape& shape, int max_blocks,
                   cudaStream_t stream) {
  if (batch.count == 0 || batch.num_layers == 0) return Status::ok();
  if (batch.num_parts < 1 || batch.num_parts > 2 || max_blocks < 1 || shape.warps_per_block < 1)
    return invalid_argument("launch_rows: bad batch or shape");
  if (batch.num_parts == 2 && batch.parts[0].layout.codec != batch.parts[1].layout.codec) {
    // K and V in different codecs: one launch per part (the codec is the
    // kernel's template argument), queued one after the other.
    for (int p = 0; p < 2; ++p) {
      RowBatch part = batch;
      part.parts[0] = batch.parts[p];
      part.num_parts = 1;
      HIQ_RETURN_IF_ERROR(launch_rows(direction, part, shape, max_blocks, stream));
    }
    return Status::ok();
  }
  DeviceBatch b{};
  const CodecKind codec = batch.parts[0].layout.codec;
  size_t per_warp = 16;
  for (int p = 0; p < batch.num_parts; ++p) {
    const PlaneView& v = batch.parts[p];
    const size_t slot_stride = v.records_slot_stride != 0 ? v.records_slot_stride : v.layout.record_bytes;
    b.parts[p] = {v.rows, v.rows_layer_stride, v.records, v.records_layer_stride, slot_stride, device_layout(v.layout)};
    per_warp = std::max(per_warp, scratch_bytes(v.layout, direction));
  }
  if (shape.direction != direction || per_warp * static_cast<size_t>(shape.warps_per_block) > shape.shared_bytes)
    return invalid_argument("launch_rows: the kernel shape was made for another direction or smaller rows");
  b.num_parts = batch.num_parts;
  b.l1_rows = batch.l1_rows;
  b.records = batch.records;
  b.count = batch.count;
  b.first_layer = batch.first_layer;
  b.num_layers = batch.num_layers;
  b.counters = batch.counters;
  b.scratch_bytes_per_warp = static_cast<unsigned>(shape.shared_bytes / static_cast<size_t>(shape.warps_per_block));
  const size_t rows = size_t{batch.count} * static_cast<size_t>(batch.num_parts) * static_cast<size_t>(batch.num_layers);
  const size_t wanted = (rows + static_cast<size_t>(shape.warps_per_block) - 1) / static_cast<size_t>(shape.warps_per_block);
  const int blocks = static_cast<int>(std::min<size_t>(wanted, static_cast<size_t>(max_blocks)));
  return direction == Direction::kEncode ? dispatch<Direction::kEncode>(codec, b, shape, blocks, stream)
                                         : dispatch<Direction::kDecode>(codec, b, shape, blocks, stream);
}

}  // namespace hiq::cuda
