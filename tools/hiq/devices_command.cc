// `hiq devices`: the GPUs this build can use, or why there are none.
#include <iostream>

#include <nlohmann/json.hpp>

#include "core/units.h"
#include "cuda/device.h"
#include "tools/hiq/commands.h"
#include "tools/hiq/table.h"

namespace hiq::cli {

Subcommand add_devices_command(CLI::App& parent) {
  auto json = std::make_shared<bool>(false);
  CLI::App* app = parent.add_subcommand("devices", "List the CUDA devices this build can use");
  app->add_flag("--json", *json, "Print JSON");
  return {app, [json] {
            auto gpus = cuda::query_gpus();
            if (!gpus) {
              if (*json) {
                std::cout << nlohmann::json{{"cuda_backend", cuda::backend_built()},
                                            {"devices", nlohmann::json::array()},
                                            {"reason", gpus.status().message()}}
                                 .dump(2)
                          << '\n';
              } else {
                std::cout << "no GPU: " << gpus.status().message() << '\n';
              }
              // Having no GPU (or no driver, or a build without CUDA) is a valid
              // answer; a device query that failed is a broken GPU, and says so.
              return gpus.status().code() == StatusCode::kUnavailable ? 0 : 1;
            }
            if (*json) {
              nlohmann::json list = nlohmann::json::array();
              for (const auto& g : *gpus)
                list.push_back({{"index", g.index}, {"name", g.name},
                                {"compute_capability", std::to_string(g.compute_major) + "." + std::to_string(g.compute_minor)},
                                {"multiprocessors", g.multiprocessors}, {"memory_bytes", g.global_memory_bytes},
                                {"l2_cache_bytes", g.l2_cache_bytes}, {"can_map_host_memory", g.can_map_host_memory},
                                {"async_engines", g.async_engines}});
              std::cout << nlohmann::json{{"cuda_backend", true}, {"devices", list}}.dump(2) << '\n';
              return 0;
            }
            Table table({"gpu", "name", "sm", "SMs", "memory", "L2 cache", "copy engines", "map host"});
            for (const auto& g : *gpus)
              table.add_row({std::to_string(g.index), g.name,
                             std::to_string(g.compute_major) + "." + std::to_string(g.compute_minor),
                             std::to_string(g.multiprocessors), format_bytes(g.global_memory_bytes),
                             format_bytes(g.l2_cache_bytes), std::to_string(g.async_engines),
                             g.can_map_host_memory ? "yes" : "no"});
            table.print(std::cout);
            return 0;
          }};
}

}  // namespace hiq::cli
