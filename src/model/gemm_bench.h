// model/gemm_bench.h — `hiq bench gemm`: the matrix products of a decode
// step (a few rows times each weight matrix of a layer, and the LM head) on
// cuBLASLt and on the skinny kernel (model/cuda/skinny_gemm.h), timed in the
// same run, with a device-to-device copy as the memory reference.
//
// Such products are bound by reading the weights, so each is reported as the
// rate its weights stream at. The weights rotate over enough copies that they
// come from device memory, not the L2 cache, as they do in a model whose
// layers' weights are many times the cache.
//
// With `algorithms`, the same products (any row count: a prefill's too) on
// each of cuBLASLt's best-ranked algorithms, to see how far its first
// choice is from the fastest.
//
// With `prefill_rows`, a prefill layer's products instead (run_prefill_gemm_bench):
// each on cuBLAS and on the Hopper kernel (model/cuda/gemm_sm90.h), alone
// and with the step after it — the residual add and the norm after o_proj
// and down, the SiLU gate after gate|up — as a pass runs them either way.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace hiq {

struct GemmBenchOptions {
  std::vector<int> rows = {1, 8, 16, 32};  // x's rows: the decode batch
  // Qwen3-8B's: hidden size, query and KV projection widths (heads × head_dim), MLP width, vocabulary.
  int hidden = 4096, q_out = 4096, kv_out = 1024, intermediate = 12288, vocab = 151936;
  double seconds_per_measurement = 0.3;
  // Also time the first this many algorithms cuBLASLt's heuristic ranks for
  // each product (0: none), and compare each one's result with the first's,
  // bit for bit: an algorithm that gives other bits could not replace it
  // without changing the model's numerics.
  int algorithms = 0;
  // A prefill's rows (run_prefill_gemm_bench).
  std::vector<int> prefill_rows;
};

struct GemmBenchReport {
  std::string gpu;
  double copy_bytes_per_s = 0;  // cudaMemcpy device to device: bytes read plus written per second
  struct Row {
    int rows = 0;
    std::string product;  // "qkv", "o_proj", "gate_up", "down", "lm_head"
    int n = 0, k = 0;
    double cublas_seconds = 0, skinny_seconds = 0;
    double max_abs_difference = 0;  // between the two results
    struct Algorithm {
      std::string name;  // cuBLASLt's configuration of it
      size_t workspace_bytes = 0;
      double seconds = 0;
      bool same_bits = false;  // as the first listed: the one the model runs (model/cuda/gemm.h)
      double max_abs_difference = 0;
    };
    std::vector<Algorithm> algorithms;  // best-ranked first
  };
  std::vector<Row> products;
};

// Needs a CUDA GPU (kUnavailable otherwise). `progress(done, total)` after each row count.
Result<GemmBenchReport> run_gemm_bench(const GemmBenchOptions& options,
                                       const std::function<void(size_t, size_t)>& progress = nullptr);

struct PrefillGemmBenchReport {
  std::string gpu;
  struct Row {
    int rows = 0;
    std::string step;  // "qkv", "o_proj + add + norm", "gate_up + silu", "down + add + norm"
    int n = 0, k = 0;  // the product's (gate_up: n is 2 · intermediate)
    double cublas_seconds = 0, sm90_seconds = 0;  // the product alone, BF16 out
    // The product and the step after it: cuBLAS then the separate kernel(s),
    // against the Hopper kernel with the step in its epilogue (and the norm
    // after it); qkv has no step (0).
    double cublas_step_seconds = 0, sm90_step_seconds = 0;
    double max_abs_difference = 0;  // between the two ways' results (the step's when there is one)
  };
  std::vector<Row> rows;
};

// Needs a Hopper GPU (compute capability 9.0; kUnavailable otherwise) and
// options.prefill_rows. `progress(done, total)` after each row count.
Result<PrefillGemmBenchReport> run_prefill_gemm_bench(const GemmBenchOptions& options,
                                                      const std::function<void(size_t, size_t)>& progress = nullptr);

}  // namespace hiq
