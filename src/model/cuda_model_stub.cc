// Serves model/cuda_model.h and model/model_bench.h in builds without the
// CUDA backend: both answer kUnavailable.
#include "model/cuda_model.h"
#include "model/cuda_tp_model.h"
#include "model/model_bench.h"

namespace hiq {
namespace {
Status not_built() { return unavailable("this build has no CUDA backend (configure with HIQ_CUDA=ON)"); }
}  // namespace

Result<std::unique_ptr<CudaModel>> make_cuda_model(const ModelShape&, const CpuModelWeights&,
                                                   const CudaModelOptions&, RowParallelReduce) {
  return not_built();
}

Result<std::unique_ptr<CudaTpModel>> make_cuda_tp_model(const ModelShape&, const CpuModelWeights&, int,
                                                        const CudaTpOptions&) {
  return not_built();
}

Result<ModelBenchReport> run_model_bench(const ModelConfig&, const ModelShape&, const CpuModelWeights&,
                                         const ModelBenchOptions&, const std::function<void(size_t, size_t)>&) {
  return not_built();
}

Result<TpBenchReport> run_tp_model_bench(const ModelConfig&, const ModelShape&, const CpuModelWeights&, int,
                                         const CudaTpOptions&, const ModelBenchOptions&,
                                         const std::function<void(size_t, size_t)>&) {
  return not_built();
}

}  // namespace hiq
