// cuda/device.h — which GPUs this process can use, in host-only terms.
//
// Served by cuda/device.cu in a CUDA build and by cuda/device_stub.cc otherwise,
// so callers need no #ifdefs: without CUDA every query reports kUnavailable.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/status.h"

namespace hiq::cuda {

struct GpuInfo {
  int index = 0;
  std::string name;
  int compute_major = 0, compute_minor = 0;
  int multiprocessors = 0;
  size_t global_memory_bytes = 0;
  size_t l2_cache_bytes = 0;
  size_t shared_memory_per_block_optin = 0;  // the most a kernel may ask for
  bool can_map_host_memory = false;          // zero-copy access to pinned host memory
  bool concurrent_copy_and_kernel = false;   // async engines: copies overlap kernels
  int async_engines = 0;
};

// True when this binary was built with the CUDA backend.
bool backend_built();

// The CUDA runtime and driver versions (e.g. 13000), or kUnavailable.
struct Versions {
  int runtime = 0;
  int driver = 0;
};
Result<Versions> versions();

// Every visible GPU; kUnavailable when the build has no CUDA, no driver is
// loaded or no device is present (the message says which); kInternal when the
// query itself fails on a machine that has a driver (a broken GPU machine).
Result<std::vector<GpuInfo>> query_gpus();

}  // namespace hiq::cuda
