// Serves model/attention_bench.h in builds without the CUDA backend.
#include "model/attention_bench.h"

namespace hiq {

Result<AttentionBenchReport> run_attention_bench(const AttentionBenchOptions&,
                                                 const std::function<void(size_t, size_t)>&) {
  return unavailable("this build has no CUDA backend (configure with HIQ_CUDA=ON)");
}

}  // namespace hiq
