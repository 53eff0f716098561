// model/cuda/gemm.h (internal to the CUDA model) — the matrix products of the
// forward pass, y[m][n] = x[m][k] · w[n][k]ᵀ: BF16 in, FP32 compute, BF16 or
// FP32 out, on cuBLASLt.
//
// A plan per (m, n, k, output type) holds the matmul descriptor, the three
// matrix layouts and the algorithm cuBLASLt's heuristic ranks first for them
// with the model's workspace. It is made on the shape's first product and
// kept, so a shape runs one algorithm for the model's life: the same bits run
// after run, in a CUDA graph or not. (Timing the heuristic's top few and
// keeping the fastest could pick another algorithm in another process. On
// the H200 the eight it offers for each prefill shape give the same bits
// and the fastest saves 0–8 % (`hiq bench gemm --algorithms`,
// docs/benchmarks.md), but timing eight candidates for every new prompt
// length would cost more than that.) Where the heuristic offers nothing, or
// an operand is not 256-byte aligned as its algorithms assume, cublasGemmEx
// runs the product.
//
// No fused epilogue: the layers' only candidates would change the rounding
// that follows transformers step by step (a residual add through beta = 1
// rounds once where the reference rounds the product first), and the output
// bias of the few models that have one is a small share of a pass.
//
// The products of a decode step of up to 8 rows go to our own kernel
// instead (skinny_gemm.h). Such a product streams its weights, and at these
// rows the skinny kernel streams them faster than cuBLAS's kernels at every
// product of Qwen3-8B, on both the H200 and the H100 (`hiq bench gemm`, the
// same run; docs/benchmarks.md, 2026-12-06): 0.77–0.97× cuBLAS's time on the
// layers' products and 0.97–0.98× on the LM head on the H200, 0.77–0.93×
// on the H100. At 16 rows it is slower on the H200 for all but o_proj, and at
// 32 slower everywhere: cuBLAS keeps those. (A decode step's gate_up runs
// on it through run_fused: its SiLU·up epilogue saves a kernel.)
//
// After a shape's plan exists its products allocate nothing and never
// synchronise, so they can be captured in a CUDA graph.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/status.h"
#include "cuda/buffers.h"
#include "model/cuda/skinny_gemm.h"

namespace hiq::cuda {

class Gemms {
 public:
  // Products on `stream`, with `workspace` (device memory that outlives this)
  // as cuBLAS's and cuBLASLt's scratch.
  static Result<Gemms> create(cudaStream_t stream, void* workspace, size_t workspace_bytes);

  // y[m][n] = x[m][k] · w[n][k]ᵀ; y_type CUDA_R_16BF or CUDA_R_32F.
  Status run(const __nv_bfloat16* x, int m, const __nv_bfloat16* w, int n, int k, void* y, cudaDataType_t y_type);

  // The product on the skinny kernel with the steps `fusion` names fused in
  // (skinny_gemm.h), whatever the rule above says; y BF16. fuses() says
  // whether a pass of m rows should: none with Skinny::kNever.
  Status run_fused(const __nv_bfloat16* x, int m, const __nv_bfloat16* w, int n, int k, __nv_bfloat16* y,
                   const SkinnyFusion& fusion);
  bool fuses(int m) const { return skinny_ != Skinny::kNever && m >= 1 && m <= kSkinnyRows; }

  // The algorithm run() uses for a product shape (none when cublasGemmEx
  // computes it), then the others cuBLASLt's heuristic ranks first, at most
  // `most` in all. For the benchmarks, with run_algorithm() to time or
  // compare each.
  // (The algorithm is kept as its bytes: nvcc 13's front end fails on a
  // std::vector of any struct holding cuBLASLt's unnamed algorithm struct.)
  struct Algorithm {
    std::array<uint64_t, 8> config{};  // a cublasLtMatmulAlgo_t
    size_t workspace_bytes = 0;
    std::string name;  // its configuration: "algo 66 tile 26 stages 17 split-k 1 …"
  };
  Result<std::vector<Algorithm>> algorithms(int m, int n, int k, cudaDataType_t y_type, int most);
  Status run_algorithm(const Algorithm& algorithm, const __nv_bfloat16* x, int m, const __nv_bfloat16* w, int n,
                       int k, void* y, cudaDataType_t y_type);

  // Which products the skinny kernel computes: those the rule above gives it
  // (the default), none, or every one it can take (for the benchmarks).
  enum class Skinny { kAuto, kNever, kWhereverPossible };
  void set_skinny(Skinny skinny) { skinny_ = skinny; }
  cudaStream_t stream() const { return stream_; }

 private:
  struct HandleDestroy {
    void operator()(cublasHandle_t h) const { (void)cublasDestroy(h); }
  };
  struct LtHandleDestroy {
    void operator()(cublasLtHandle_t h) const { (void)cublasLtDestroy(h); }
  };
  struct DescDestroy {
    void operator()(cublasLtMatmulDesc_t d) const { (void)cublasLtMatmulDescDestroy(d); }
  };
  struct LayoutDestroy {
    void operator()(cublasLtMatrixLayout_t l) const { (void)cublasLtMatrixLayoutDestroy(l); }
  };
  struct Plan {
    Owned<cublasLtMatmulDesc_t, DescDestroy> desc;
    Owned<cublasLtMatrixLayout_t, LayoutDestroy> w, x, y;
    cublasLtMatmulAlgo_t algo{};
    size_t algo_workspace_bytes = 0;
    bool lt = false;  // false: the heuristic had nothing, cublasGemmEx runs it
  };
  using Key = std::tuple<int, int, int, cudaDataType_t>;  // m, n, k, y type
  // A server meets every prompt length, so plans are bounded: past this many
  // they are all made again (to the same algorithms).
  static constexpr size_t kMostPlans = 4096;

  Result<const Plan*> plan(int m, int n, int k, cudaDataType_t y_type);
  // The heuristic's first `most` usable results for a plan's layouts, best
  // first, into out[0 … most): how many (none is not an error).
  Result<int> ranked(const Plan& p, int most, cublasLtMatmulHeuristicResult_t* out);
  Status gemm_ex(const __nv_bfloat16* x, int m, const __nv_bfloat16* w, int n, int k, void* y,
                 cudaDataType_t y_type);

  cudaStream_t stream_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  Owned<cublasHandle_t, HandleDestroy> cublas_;
  Owned<cublasLtHandle_t, LtHandleDestroy> lt_;
  std::map<Key, Plan> plans_;
  bool logged_fallback_ = false;
  static constexpr int kSkinnyRows = 8;
  Skinny skinny_ = Skinny::kAuto;
};

}  // namespace hiq::cuda
