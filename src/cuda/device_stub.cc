// Serves cuda/device.h and codec/cuda/convert.h in builds without the CUDA backend.
#include "codec/cuda/convert.h"
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

}  // namespace hiq::cuda
