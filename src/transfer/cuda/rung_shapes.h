// transfer/cuda/rung_shapes.h (internal) — the codec kernels' block shapes
// for every rung of a host pool, as the engines that move its records need.
#pragma once

#include <vector>

#include "codec/cuda/row_kernels.h"
#include "core/status.h"
#include "memory/host_kv_pool.h"

namespace hiq {

struct RungKernelShapes {
  std::vector<cuda::KernelShape> encode, decode;  // per rung, on the current device
};

// `parts`: the rows per layer (K, or K and V). Errors: kernel_shape's.
inline Result<RungKernelShapes> rung_kernel_shapes(const HostKvPool& pool, int parts) {
  RungKernelShapes shapes;
  for (int rung = 0; rung < pool.rungs(); ++rung) {
    const RecordLayout layouts[2] = {pool.layout(KvPart::kK, rung), pool.layout(KvPart::kV, rung)};
    HIQ_ASSIGN_OR_RETURN(const cuda::KernelShape e, cuda::kernel_shape(cuda::Direction::kEncode, layouts, parts));
    HIQ_ASSIGN_OR_RETURN(const cuda::KernelShape d, cuda::kernel_shape(cuda::Direction::kDecode, layouts, parts));
    shapes.encode.push_back(e);
    shapes.decode.push_back(d);
  }
  return shapes;
}

}  // namespace hiq
