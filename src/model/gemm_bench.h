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

}  // namespace hiq
