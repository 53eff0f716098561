// Serves model/gemm_bench.h in builds without the CUDA backend.
#include "model/gemm_bench.h"

namespace hiq {

Result<GemmBenchReport> run_gemm_bench(const GemmBenchOptions&, const std::function<void(size_t, size_t)>&) {
  return unavailable("this build has no CUDA backend (configure with HIQ_CUDA=ON)");
}

Result<PrefillGemmBenchReport> run_prefill_gemm_bench(const GemmBenchOptions&,
                                                      const std::function<void(size_t, size_t)>&) {
  return unavailable("this build has no CUDA backend (configure with HIQ_CUDA=ON)");
}

}  // namespace hiq
