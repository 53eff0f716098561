#include "model/cuda/gemm.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
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

  cublasLtMatmulHeuristicResult_t first{};
  HIQ_ASSIGN_OR_RETURN(const int found, ranked(p, 1, &first));
  p.lt = found > 0;
  p.algo = first.algo;
  p.algo_workspace_bytes = first.workspaceSize;
  if (!p.lt && !logged_fallback_) {
    logged_fallback_ = true;
    log(LogLevel::kWarning, "model",
        "cuBLASLt offers no algorithm for the product " + std::to_string(m) + " x " + std::to_string(n) + " x " +
            std::to_string(k) + "; cublasGemmEx computes it (and any other such shape, not logged again)");
  }
  return &plans_.emplace(key, std::move(p)).first->second;
}

Result<int> Gemms::ranked(const Plan& p, int most, cublasLtMatmulHeuristicResult_t* out) {
  cublasLtMatmulPreference_t preference = nullptr;
  HIQ_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t most_workspace = workspace_bytes_;
  int found = 0;
  cublasStatus_t asked = cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                              &most_workspace, sizeof(most_workspace));
  if (asked == CUBLAS_STATUS_SUCCESS)
    asked = cublasLtMatmulAlgoGetHeuristic(lt_.get(), p.desc.get(), p.w.get(), p.x.get(), p.y.get(), p.y.get(),
                                           preference, most, out, &found);
  (void)cublasLtMatmulPreferenceDestroy(preference);
  // No algorithm (CUBLAS_STATUS_NOT_SUPPORTED) is not an error: cublasGemmEx takes the shape.
  if (asked == CUBLAS_STATUS_NOT_SUPPORTED) return 0;
  if (asked != CUBLAS_STATUS_SUCCESS) return cublas_status(asked, "cublasLtMatmulAlgoGetHeuristic");
  int usable = 0;
  for (int i = 0; i < found; ++i)
    if (out[i].state == CUBLAS_STATUS_SUCCESS && out[i].workspaceSize <= workspace_bytes_) out[usable++] = out[i];
  return usable;
}

namespace {

// "algo 66 tile 26 stages 17 split-k 1 reduction 0 inner 0 custom 0 swizzle 0
// cluster 2": what tells two of cuBLASLt's algorithms apart, from its own
// attributes.
std::string describe(const cublasLtMatmulAlgo_t& algo) {
  const auto attribute = [&](cublasLtMatmulAlgoConfigAttributes_t which) {
    // Attributes are 2 or 4 bytes wide: ask the width, then read it into a zeroed 8 (little-endian).
    size_t size = 0;
    uint64_t value = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, which, nullptr, 0, &size) != CUBLAS_STATUS_SUCCESS ||
        size > sizeof(value) ||
        cublasLtMatmulAlgoConfigGetAttribute(&algo, which, &value, size, &size) != CUBLAS_STATUS_SUCCESS)
      return std::string("?");
    return std::to_string(value);
  };
  return "algo " + attribute(CUBLASLT_ALGO_CONFIG_ID) + " tile " + attribute(CUBLASLT_ALGO_CONFIG_TILE_ID) +
         " stages " + attribute(CUBLASLT_ALGO_CONFIG_STAGES_ID) + " split-k " +
         attribute(CUBLASLT_ALGO_CONFIG_SPLITK_NUM) + " reduction " + attribute(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) +
         " inner " + attribute(CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID) + " custom " +
         attribute(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION) +
         " swizzle " + attribute(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING) +
         " cluster " + attribute(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
}

}  // namespace

Result<std::vector<Gemms::Algorithm>> Gemms::algorithms(int m, int n, int k, cudaDataType_t y_type, int most) {
  HIQ_ASSIGN_OR_RETURN(const Plan* p, plan(m, n, k, y_type));
  std::vector<Algorithm> out;
  if (most < 1) return out;
  const auto add = [&](const cublasLtMatmulAlgo_t& algo, size_t workspace_bytes) {
    static_assert(sizeof(Algorithm::config) == sizeof(cublasLtMatmulAlgo_t));
    Algorithm a;
    std::memcpy(a.config.data(), &algo, sizeof(algo));
    a.workspace_bytes = workspace_bytes;
    a.name = describe(algo);
    out.push_back(std::move(a));
  };
  // The plan's own first, whatever a longer ranking puts first; then the
  // ranking's others.
  if (p->lt) add(p->algo, p->algo_workspace_bytes);
  const auto results = std::make_unique<cublasLtMatmulHeuristicResult_t[]>(static_cast<size_t>(most) + 1);
  HIQ_ASSIGN_OR_RETURN(const int found, ranked(*p, most + 1, results.get()));
  for (int i = 0; i < found && out.size() < static_cast<size_t>(most); ++i)
    if (!p->lt || std::memcmp(&results[i].algo, &p->algo, sizeof(p->algo)) != 0)
      add(results[i].algo, results[i].workspaceSize);
  return out;
}

Status Gemms::run_algorithm(const Algorithm& algorithm, const __nv_bfloat16* x, int m, const __nv_bfloat16* w, int n,
                            int k, void* y, cudaDataType_t y_type) {
  if (!aligned(x) || !aligned(w) || !aligned(y))
    return invalid_argument("gemm: run_algorithm needs 256-byte aligned operands");
  HIQ_ASSIGN_OR_RETURN(const Plan* p, plan(m, n, k, y_type));
  cublasLtMatmulAlgo_t algo;
  std::memcpy(&algo, algorithm.config.data(), sizeof(algo));
  const float one = 1.f, zero = 0.f;
  return cublas_status(cublasLtMatmul(lt_.get(), p->desc.get(), &one, w, p->w.get(), x, p->x.get(), &zero, y,
                                      p->y.get(), y, p->y.get(), &algo, workspace_, workspace_bytes_,
                                      stream_),
                       "cublasLtMatmul");
}

Status Gemms::run(const __nv_bfloat16* x, int m, const __nv_bfloat16* w, int n, int k, void* y,
                  cudaDataType_t y_type) {
  if (m == 0) return Status::ok();
  const bool skinny = skinny_ == Skinny::kWhereverPossible ||
                      (skinny_ == Skinny::kAuto && m <= kSkinnyRows);
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
