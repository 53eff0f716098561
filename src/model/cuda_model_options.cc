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
