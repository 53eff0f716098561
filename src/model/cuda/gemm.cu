#include "model/cuda/gemm.h"

#include <cstdint>
#include <string>
#include <utility>

#include "core/log.h"

namespace hiq::cuda {
namespace {

Status cublas_status(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return Status::ok();
  return internal_error(std::string(what) + " failed: " + cublasGetStatusString(status));
}

#define HIQ_CUBLAS_RETURN_IF_ERROR(call) HIQ_RETURN_IF_ERROR(cublas_status((call), #call))

constexpr uintptr_t kAlignment = 256;  // what cuBLASLt's heuristic assumes of every operand by default

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kAlignment == 0; }

}  // namespace

Result<Gemms> Gemms::create(cudaStream_t stream, void* workspace, size_t workspace_bytes) {
  Gemms g;
  g.stream_ = stream;
  g.workspace_ = workspace;
  g.workspace_bytes_ = workspace_bytes;
  cublasHandle_t handle = nullptr;
  HIQ_CUBLAS_RETURN_IF_ERROR(cublasCreate(&handle));
  g.cublas_ = decltype(g.cublas_)(handle);
  HIQ_CUBLAS_RETURN_IF_ERROR(cublasSetStream(handle, stream));
  HIQ_CUBLAS_RETURN_IF_ERROR(cublasSetWorkspace(handle, workspace, workspace_bytes));
  cublasLtHandle_t lt = nullptr;
  HIQ_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&lt));
  g.lt_ = decltype(g.lt_)(lt);
  return Result<Gemms>(std::move(g));
}

Result<const Gemms::Plan*> Gemms::plan(int m, int n, int k, cudaDataType_t y_type) {
  const Key key{m, n, k, y_type};
  if (const auto it = plans_.find(key); it != plans_.end()) return &it->second;
  if (plans_.size() >= kMostPlans) plans_.clear();

  // Column-major, as cuBLAS sees our row-major arrays: yᵀ[n][m] = w[n][k] ·
  // xᵀ[k][m], w being stored as wᵀ (k × n, transposed by the op).
  Plan p;
  cublasLtMatmulDesc_t desc = nullptr;
  HIQ_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  p.desc = decltype(p.desc)(desc);
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  HIQ_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
  HIQ_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)));
  cublasLtMatrixLayout_t w = nullptr, x = nullptr, y = nullptr;
  HIQ_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&w, CUDA_R_16BF, k, n, k));
  p.w = decltype(p.w)(w);
  HIQ_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&x, CUDA_R_16BF, k, m, k));
  p.x = decltype(p.x)(x);
  HIQ_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&y, y_type, n, m, n));
  p.y = decltype(p.y)(y);

  cublasLtMatmulPreference_t preference = nullptr;
  HIQ_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t most_workspace = workspace_bytes_;
  cublasLtMatmulHeuristicResult_t best{};
  int found = 0;
  cublasStatus_t asked = cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                              &most_workspace, sizeof(most_workspace));
  if (asked == CUBLAS_STATUS_SUCCESS)
    asked = cublasLtMatmulAlgoGetHeuristic(lt_.get(), desc, w, x, y, y, preference, 1, &best, &found);
  (void)cublasLtMatmulPreferenceDestroy(preference);
  // No algorithm (CUBLAS_STATUS_NOT_SUPPORTED) is not an error: cublasGemmEx takes the shape.
  if (asked != CUBLAS_STATUS_SUCCESS && asked != CUBLAS_STATUS_NOT_SUPPORTED)
    return cublas_status(asked, "cublasLtMatmulAlgoGetHeuristic");
  p.lt = asked == CUBLAS_STATUS_SUCCESS && found > 0 && best.state == CUBLAS_STATUS_SUCCESS &&
         best.workspaceSize <= workspace_bytes_;
  p.algo = best.algo;
  if (!p.lt && !logged_fallback_) {
    logged_fallback_ = true;
    log(LogLevel::kWarning, "model",
        "cuBLASLt offers no algorithm for the product " + std::to_string(m) + " x " + std::to_string(n) + " x " +
            std::to_string(k) + "; cublasGemmEx computes it (and any other such shape, not logged again)");
  }
  return &plans_.emplace(key, std::move(p)).first->second;
}

Status Gemms::run(const __nv_bfloat16* x, int m, const __nv_bfloat16* w, int n, int k, void* y,
                  cudaDataType_t y_type) {
  if (m == 0) return Status::ok();
  const bool skinny = skinny_ == Skinny::kWhereverPossible ||
                      (skinny_ == Skinny::kAuto && m <= kSkinnyRows && int64_t{n} * k <= kSkinnyElements);
  if (skinny && skinny_gemm_supports(x, m, w, k, y, y_type))
    return launch_skinny_gemm(x, m, w, n, k, y, y_type, stream_);
  HIQ_ASSIGN_OR_RETURN(const Plan* p, plan(m, n, k, y_type));
  if (!p->lt || !aligned(x) || !aligned(w) || !aligned(y)) return gemm_ex(x, m, w, n, k, y, y_type);
  const float one = 1.f, zero = 0.f;
  return cublas_status(cublasLtMatmul(lt_.get(), p->desc.get(), &one, w, p->w.get(), x, p->x.get(), &zero, y,
                                      p->y.get(), y, p->y.get(), &p->algo, workspace_, workspace_bytes_, stream_),
                       "cublasLtMatmul");
}

Status Gemms::run_fused(const __nv_bfloat16* x, int m, const __nv_bfloat16* w, int n, int k, __nv_bfloat16* y,
                        const SkinnyFusion& fusion) {
  if (m == 0) return Status::ok();
  return launch_skinny_gemm(x, m, w, n, k, y, CUDA_R_16BF, stream_, fusion);
}

Status Gemms::gemm_ex(const __nv_bfloat16* x, int m, const __nv_bfloat16* w, int n, int k, void* y,
                      cudaDataType_t y_type) {
  const float one = 1.f, zero = 0.f;
  return cublas_status(cublasGemmEx(cublas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, CUDA_R_16BF, k, x,
                                    CUDA_R_16BF, k, &zero, y, y_type, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                       "cublasGemmEx");
}

}  // namespace hiq::cuda
