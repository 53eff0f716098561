// tools/hiq/cuda_graph_flags.h — the flags of CudaModelOptions, with SGLang's
// names, shared by `hiq serve` (and `hiq bench serve --model`) and
// `hiq bench model`.
#pragma once

#include <CLI/CLI.hpp>

#include "model/cuda_model_options.h"
#include "tools/hiq/flag_errors.h"

namespace hiq::cli {

inline void add_cuda_graph_flags(CLI::App* app, CudaModelOptions& options) {
  CudaModelOptions* o = &options;
  app->add_flag_callback(
      "--disable-cuda-graph", [o] { o->cuda_graphs = false; },
      "--device cuda: launch every kernel of every decode step instead of replaying CUDA graphs (same tokens)");
  app->add_option("--cuda-graph-max-bs", o->cuda_graph_max_batch,
                  "--device cuda: the largest decode batch run at its bucket (1, 2, 4, 8, then multiples of 8) "
                  "and through a CUDA graph")
      ->capture_default_str();
  app->add_flag_callback(
      "--enable-fused-decode", [o] { o->fused_decode = true; },
      "--device cuda: run a decode step's norms, residual adds and SiLU inside its matrix products instead of as "
      "kernels of their own (same tokens; slower through CUDA graphs on the H200)");
  app->add_flag_callback(
      "--enable-fused-prefill", [o] { o->fused_prefill = true; },
      "--device cuda on a Hopper GPU: run a prefill's residual adds and SiLU gate in the epilogues of its matrix "
      "products (our kernel instead of cuBLAS for those products)");
}

// CudaModelOptions::validate(), naming the flags.
inline Status check_cuda_graph_flags(const CudaModelOptions& options) {
  return with_flag_names(options.validate(), {{"cuda_graph_max_batch", "--cuda-graph-max-bs"}});
}

}  // namespace hiq::cli
