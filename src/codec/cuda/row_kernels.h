// codec/cuda/row_kernels.h (internal) — the launcher of the fused
// gather → encode → store and load → decode → scatter kernels.
//
// One kernel moves rows of some layers of one or two planes (K and V): row
// `l1_rows[i]` of an L1 plane and record `records[i]` of a record plane, for
// every layer in [first_layer, first_layer + num_layers). The record plane may
// be device memory (codec only) or pinned, mapped host memory (the L2 tier:
// the kernel then reads or writes it over PCIe, zero-copy). Each warp handles
// one row at a time; rows are taken layer by layer, so in a multi-layer launch
// early layers finish first.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "codec/codec.h"
#include "core/status.h"

namespace hiq::cuda {

struct DeviceLayout;  // codec/cuda/row_codec.cuh

enum class Direction : uint8_t { kEncode, kDecode };

// One part (K or V) of every layer.
struct PlaneView {
  uint16_t* rows = nullptr;           // L1 row 0 of layer 0 (device memory)
  size_t rows_layer_stride = 0;       // elements from one layer's plane to the next
  std::byte* records = nullptr;       // record 0 of layer 0 (device memory, or mapped pinned host memory)
  size_t records_layer_stride = 0;    // bytes from one layer's record plane to the next
  size_t records_slot_stride = 0;     // bytes from one record index to the next (0: layout.record_bytes); may be
                                      // less than a record (a tiered pool's granule): the indices keep records apart
  RecordLayout layout;
};

struct RowBatch {
  PlaneView parts[2];
  int num_parts = 1;
  const uint32_t* l1_rows = nullptr;   // device array of `count` L1 row (slot) indices
  const uint32_t* records = nullptr;   // device array of `count` record indices
  uint32_t count = 0;
  int first_layer = 0, num_layers = 1;
  // Encode only: device counters [non-finite heads, out-of-range heads], added to.
  unsigned long long* counters = nullptr;
};

// Threads and shared memory of one block, for a batch's layouts.
struct KernelShape {
  Direction direction = Direction::kEncode;
  int warps_per_block = 0;
  size_t shared_bytes = 0;  // dynamic shared memory per block
};

// The block shape for `layouts` on the current device: up to 32 warps, as many
// as shared memory allows. kInvalidArgument when one warp's work area (a
// record plus, at most, a row of floats) exceeds what a block may have.
Result<KernelShape> kernel_shape(Direction direction, const RecordLayout* layouts, int num_layouts);

// Queues the kernel on `stream` with at most `max_blocks` blocks. The caller
// keeps every buffer alive until the stream passes the kernel. A batch of no
// rows queues nothing.
Status launch_rows(Direction direction, const RowBatch& batch, const KernelShape& shape, int max_blocks,
                   cudaStream_t stream);

}  // namespace hiq::cuda
