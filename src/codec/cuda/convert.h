// codec/cuda/convert.h — the GPU's own number conversions, run on host arrays.
//
// The record formats promise the same bytes on CPU and GPU. These probes run the
// device intrinsics that the transfer kernels use (float→bf16 and float→E4M3 with
// round-to-nearest-even and saturation, E4M3→float) over host arrays, so a test
// can compare them value by value with codec/numeric.h. They allocate and
// synchronise: tests and diagnostics only, never the data path.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace hiq::cuda {

Status probe_float_to_bf16(const float* in, uint16_t* out, size_t n);
Status probe_float_to_e4m3(const float* in, uint8_t* out, size_t n);
Status probe_e4m3_to_float(const uint8_t* in, float* out, size_t n);

}  // namespace hiq::cuda
