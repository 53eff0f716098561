// codec/cuda/gpu_codec.h — the GPU codec kernels run on host arrays.
//
// The same kernels as the CUDA transfer engine's (codec/cuda/row_kernels.h),
// with contiguous rows and records: for the GPU suite to compare bytes and
// values with the CPU codecs, and for diagnostics. They allocate and
// synchronise: never the data path. kUnavailable without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/codec.h"
#include "core/status.h"

namespace hiq::cuda {

// As encode_rows() with src_row_stride = layout.shape.elements().
Status gpu_encode_rows(const RecordLayout& layout, const uint16_t* rows, size_t num_rows, std::byte* records,
                       CodecStats* stats = nullptr);
// As decode_rows() with dst_row_stride = layout.shape.elements().
Status gpu_decode_rows(const RecordLayout& layout, const std::byte* records, size_t num_rows, uint16_t* rows);

}  // namespace hiq::cuda
