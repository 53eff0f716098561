// Serves memory/cuda_device_kv_pool.h, transfer/cuda_transfer_engine.h,
// transfer/cuda_demoter.h and transfer/transfer_bench.h in builds without the
// CUDA backend: every factory answers kUnavailable.
#include <utility>

#include "memory/cuda_device_kv_pool.h"
#include "transfer/cuda_demoter.h"
#include "transfer/cuda_transfer_engine.h"
#include "transfer/transfer_bench.h"

namespace hiq {
namespace {
Status not_built() { return unavailable("this build has no CUDA backend (configure with HIQ_CUDA=ON)"); }
}  // namespace

Result<std::unique_ptr<DeviceKvPool>> make_cuda_device_kv_pool(const KvGeometry&, size_t) { return not_built(); }
Result<std::unique_ptr<DeviceKvPool>> make_cuda_device_kv_pool(int, const KvGeometry&, size_t) { return not_built(); }

PinnedHostMemory::~PinnedHostMemory() = default;
PinnedHostMemory::PinnedHostMemory(PinnedHostMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      chunk_(std::exchange(other.chunk_, 0)) {}
PinnedHostMemory& PinnedHostMemory::operator=(PinnedHostMemory&& other) noexcept {
  data_ = std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  chunk_ = std::exchange(other.chunk_, 0);
  return *this;
}
void PinnedHostMemory::release() {}
Result<PinnedHostMemory> PinnedHostMemory::pin(std::byte*, size_t, size_t) { return not_built(); }

Result<std::unique_ptr<CudaTransferEngine>> make_cuda_transfer_engine(DeviceKvPool&, HostKvPool&,
                                                                      TransferEngineOptions) {
  return not_built();
}

Result<std::unique_ptr<CudaTransferEngine>> make_cuda_rank_transfer_engine(DeviceKvPool&, HostKvPool&, int, int,
                                                                           TransferEngineOptions) {
  return not_built();
}

Result<std::unique_ptr<CudaTpTransferEngine>> make_cuda_tp_transfer_engine(std::span<DeviceKvPool* const>,
                                                                           std::span<const int>, HostKvPool&,
                                                                           TransferEngineOptions) {
  return not_built();
}

Result<TransferBenchReport> run_transfer_bench(const TransferBenchOptions&, const std::function<void(size_t, size_t)>&) {
  return not_built();
}

Result<std::shared_ptr<CudaDemoter>> make_cuda_demoter(HostKvPool&, CudaDemoterOptions) { return not_built(); }

}  // namespace hiq
