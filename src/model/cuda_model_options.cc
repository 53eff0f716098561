#include "model/cuda_model_options.h"

#include <algorithm>
#include <bit>
#include <string>

namespace hiq {

namespace {
constexpr int kMostGraphBatch = 1024;
}  // namespace

Status CudaModelOptions::validate() const {
  if (cuda_graph_max_batch < 1 || cuda_graph_max_batch > kMostGraphBatch)
    return invalid_argument("cuda_graph_max_batch must be in [1, " + std::to_string(kMostGraphBatch) + "], got " +
                            std::to_string(cuda_graph_max_batch));
  return Status::ok();
}

std::string_view tp_collective_name(TpCollective collective) {
  return collective == TpCollective::kNccl ? "nccl" : "peer";
}

Result<TpCollective> parse_tp_collective(std::string_view name) {
  if (name == "nccl") return TpCollective::kNccl;
  if (name == "peer") return TpCollective::kPeer;
  return invalid_argument("tensor-parallel collective must be nccl or peer, got '" + std::string(name) + "'");
}

Status CudaTpOptions::validate(int size) const {
  HIQ_RETURN_IF_ERROR(model.validate());
  if (size < 1) return invalid_argument("tp_size must be at least 1, got " + std::to_string(size));
  if (!devices.empty() && devices.size() != static_cast<size_t>(size))
    return invalid_argument("devices list " + std::to_string(devices.size()) +
                            (devices.size() == 1 ? " GPU for " : " GPUs for ") + std::to_string(size) + " ranks");
  for (int r = 0; r < size; ++r) {
    if (device(r) < 0) return invalid_argument("devices give rank " + std::to_string(r) + " a negative GPU");
    if (collective != TpCollective::kNccl) continue;
    for (int q = 0; q < r; ++q)
      if (device(q) == device(r))
        return invalid_argument("devices put ranks " + std::to_string(q) + " and " + std::to_string(r) + " on GPU " +
                                std::to_string(device(r)) + ", which NCCL refuses (the peer collective allows it)");
  }
  return Status::ok();
}

int decode_batch_bucket(int batch, int max_batch) {
  if (batch < 1 || batch > max_batch) return 0;
  const int bucket = batch <= 8 ? static_cast<int>(std::bit_ceil(static_cast<unsigned>(batch))) : (batch + 7) / 8 * 8;
  return std::min(bucket, max_batch);
}

int decode_context_bucket(int max_kv_len) {
  constexpr unsigned kLeast = 256;
  if (max_kv_len > (1 << 30)) return max_kv_len;  // no power of two above it fits an int
  return static_cast<int>(std::max(kLeast, std::bit_ceil(static_cast<unsigned>(std::max(max_kv_len, 1)))));
}

}  // namespace hiq
