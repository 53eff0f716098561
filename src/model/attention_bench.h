// model/attention_bench.h — `hiq bench attention`: the CUDA attention kernels
// alone, on one fresh causal prompt (optionally after a cached prefix) per
// size, each kernel this GPU can run timed in the same run and compared with
// the portable kernel's output.
//
// FLOPs are those of causal attention: 4 · head_dim · heads per visible
// (query, key) pair, the prefix fully visible to every new token.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace hiq {

struct AttentionBenchOptions {
  std::vector<int> tokens = {2048, 8192, 16384};  // new tokens per prompt
  int prefix = 0;                                  // cached context before them
  int heads = 32, kv_heads = 8, head_dim = 128;    // Qwen3-8B's
  double seconds_per_measurement = 0.5;
};

struct AttentionBenchReport {
  std::string gpu;
  struct Kernel {
    // "portable", "portable-combine-in-kernel" (a split decode context's
    // merge in the attention kernel, not a kernel of its own), "sm90", "sm90-staged"
    std::string name;
    double seconds = 0;
    double relative_error = 0;  // ‖out − portable's‖ / ‖portable's‖ (0 for portable itself)
  };
  struct Row {
    int tokens = 0, prefix = 0;
    double flops = 0;
    std::vector<Kernel> kernels;
  };
  std::vector<Row> rows;
};

// Needs a CUDA GPU (kUnavailable otherwise). `progress(done, total)` after each size.
Result<AttentionBenchReport> run_attention_bench(const AttentionBenchOptions& options,
                                                 const std::function<void(size_t, size_t)>& progress = nullptr);

}  // namespace hiq
