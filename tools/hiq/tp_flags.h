// tools/hiq/tp_flags.h — where the tensor-parallel ranks of --device cuda run
// and how they sum (--tp-collective, --tp-devices), shared by `hiq serve`,
// `hiq bench serve` and `hiq bench model`. --tp-size is each command's own.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "model/cuda_model_options.h"
#include "tools/hiq/list_flag.h"

namespace hiq::cli {

struct TpFlags {
  std::string collective = "nccl";
  std::string devices;  // empty: rank r on GPU r
};

inline void add_tp_flags(CLI::App* app, TpFlags& flags) {
  app->add_option("--tp-collective", flags.collective,
                  "--device cuda: how the ranks sum their products: nccl, or peer (ours: rank-order FP32 sums; "
                  "ranks may share a GPU)")
      ->capture_default_str();
  app->add_option("--tp-devices", flags.devices,
                  "--device cuda: comma-separated GPU of each rank (default: rank r on GPU r)");
}

// Fills the placement and the collective; errors name the flag.
inline Status apply_tp_flags(const TpFlags& flags, std::vector<int>& devices, TpCollective& collective) {
  Result<TpCollective> c = parse_tp_collective(flags.collective);
  if (!c) return c.status().with_context("--tp-collective");
  collective = *c;
  devices.clear();
  if (flags.devices.empty()) return Status::ok();
  // A sequence (rank r's GPU): repeats are data, which the options' validate() judges.
  HIQ_ASSIGN_OR_RETURN(const std::vector<int64_t> list,
                       parse_integer_list_flag(flags.devices, "--tp-devices", 0, 1023, ListRepeats::kAllow));
  devices.assign(list.begin(), list.end());
  return Status::ok();
}

}  // namespace hiq::cli
