// codec/cuda/row_codec.cuh — the record formats on the GPU: one warp encodes
// one row into one record, or decodes one record into one row, on the path
// row_path() picks for the layout. Each path is a file of its own, their
// shared helpers are row_common.cuh (which says how the arithmetic matches
// the CPU reference); this file only dispatches.
#pragma once

#include "codec/cuda/row_common.cuh"
#include "codec/cuda/row_generic.cuh"
#include "codec/cuda/row_lanes.cuh"
#include "codec/cuda/row_rotate.cuh"
#include "codec/cuda/row_vector.cuh"

namespace hiq::cuda::device {

// Encodes `row` into the record at `out`. `rec` and `work` are the warp's
// area (warp_scratch_bytes(l, true)).
template <CodecKind kCodec>
__device__ void encode_row(const DeviceLayout& l, const uint16_t* row, std::byte* out, uint8_t* rec, uint8_t* work,
                           EncodeCounts& counts, int lane) {
  if constexpr (kCodec == CodecKind::kBf16) {
    encode_row_generic<kCodec>(l, row, out, rec, reinterpret_cast<float*>(work), counts, lane);
  } else {
    const RowPath path = row_path(l);
    if (path == RowPath::kGeneric) {
      encode_row_generic<kCodec>(l, row, out, rec, reinterpret_cast<float*>(work), counts, lane);
      return;
    }
    if constexpr (kCodec == CodecKind::kInt4H) {
      switch (l.fwht_per_lane) {  // path kRotate
        case 2: encode_int4h_registers<2>(l, row, rec, work, counts, lane); break;
        case 4: encode_int4h_registers<4>(l, row, rec, work, counts, lane); break;
        default: encode_int4h_registers<8>(l, row, rec, work, counts, lane); break;
      }
    } else if (path == RowPath::kLanes) {
      encode_lanes<kCodec>(l, row, rec, counts, lane);
    } else {
      encode_fast<kCodec>(l, row, rec, work, counts, lane);
    }
    zero_tail(rec, l, lane);
    __syncwarp();
    warp_copy(out, rec, l.record_bytes, l.vector_records, lane);
    __syncwarp();
  }
}

// Decodes the record at `in` into `row`; `rec` and `work` as for encode_row.
template <CodecKind kCodec>
__device__ void decode_row(const DeviceLayout& l, const std::byte* in, uint16_t* row, uint8_t* rec, uint8_t* work,
                           int lane) {
  if constexpr (kCodec == CodecKind::kInt4H) {
    if (row_path(l) == RowPath::kRotate) {
      warp_copy(rec, in, l.record_bytes, l.vector_records, lane);
      __syncwarp();
      switch (l.fwht_per_lane) {
        case 2: decode_int4h_registers<2>(l, rec, row, lane); break;
        case 4: decode_int4h_registers<4>(l, rec, row, lane); break;
        default: decode_int4h_registers<8>(l, rec, row, lane); break;
      }
      __syncwarp();
      return;
    }
  } else if constexpr (kCodec != CodecKind::kBf16) {
    if (row_path(l) == RowPath::kLanes) {
      warp_copy(rec, in, l.record_bytes, l.vector_records, lane);
      __syncwarp();
      decode_lanes<kCodec>(l, rec, work, row, lane);
      __syncwarp();
      return;
    }
  }
  decode_row_generic<kCodec>(l, in, row, rec, reinterpret_cast<float*>(work), lane);
}

}  // namespace hiq::cuda::device
