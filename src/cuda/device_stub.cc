// Serves cuda/device.h, codec/cuda/convert.h and codec/cuda/gpu_codec.h in builds without the CUDA backend.
#include "codec/cuda/convert.h"
#include "codec/cuda/gpu_codec.h"
#include "cuda/device.h"

namespace hiq::cuda {
namespace {
Status not_built() { return unavailable("this build has no CUDA backend (configure with HIQ_CUDA=ON)"); }
}  // namespace

bool backend_built() { return false; }
Result<Versions> versions() { return not_built(); }
Result<std::vector<GpuInfo>> query_gpus() { return not_built(); }
Status probe_float_to_bf16(const float*, uint16_t*, size_t) { return not_built(); }
Status probe_float_to_e4m3(const float*, uint8_t*, size_t) { return not_built(); }
Status probe_e4m3_to_float(const uint8_t*, float*, size_t) { return not_built(); }
Status gpu_encode_rows(const RecordLayout&, const uint16_t*, size_t, std::byte*, CodecStats*) { return not_built(); }
Status gpu_decode_rows(const RecordLayout&, const std::byte*, size_t, uint16_t*) { return not_built(); }

}  // namespace hiq::cuda
