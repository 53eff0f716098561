// The L1 pool in GPU memory. read_rows/write_rows move whole rows between the
// pool and host arrays with the bf16 row kernel (a gather or scatter of BF16
// rows is exactly a bf16 "encode" or "decode" with 2-byte alignment).
#include <numeric>
#include <string>
#include <vector>

#include "codec/cuda/row_kernels.h"
#include "cuda/buffers.h"
#include "cuda/check.cuh"
#include "memory/cuda_device_kv_pool.h"

namespace hiq {
namespace {

class CudaDeviceKvPool final : public DeviceKvPool {
 public:
  CudaDeviceKvPool(const KvGeometry& geometry, size_t num_slots, cuda::DeviceMemory memory)
      : DeviceKvPool(geometry, num_slots), memory_(std::move(memory)) {}

  uint16_t* plane(int layer, KvPart part) override {
    return static_cast<uint16_t*>(memory_.get()) + plane_offset(layer, part);
  }
  bool host_accessible() const override { return false; }

  Status read_rows(int layer, KvPart part, std::span<const SlotId> slots, uint16_t* out) override {
    return move_rows(cuda::Direction::kEncode, layer, part, slots, out);
  }
  Status write_rows(int layer, KvPart part, std::span<const SlotId> slots, const uint16_t* rows) override {
    return move_rows(cuda::Direction::kDecode, layer, part, slots, const_cast<uint16_t*>(rows));
  }

 private:
  // kEncode gathers pool rows into `host`; kDecode scatters `host` into the pool.
  Status move_rows(cuda::Direction direction, int layer, KvPart part, std::span<const SlotId> slots, uint16_t* host) {
    HIQ_RETURN_IF_ERROR(check_rows(layer, part, slots));
    if (slots.empty()) return Status::ok();
    const RowShape row_shape = geometry().row_shape(part);
    HIQ_ASSIGN_OR_RETURN(const RecordLayout layout, RecordLayout::make(CodecKind::kBf16, row_shape, 2));
    const size_t n = slots.size(), bytes = n * layout.record_bytes;
    HIQ_RETURN_IF_ERROR(reserve(staging_, staging_bytes_, bytes));
    HIQ_RETURN_IF_ERROR(reserve(indices_, indices_bytes_, 2 * n * sizeof(uint32_t)));
    const cuda::DeviceMemory& staging = staging_;
    const cuda::DeviceMemory& indices = indices_;
    std::vector<uint32_t> host_indices(2 * n);
    std::copy(slots.begin(), slots.end(), host_indices.begin());
    std::iota(host_indices.begin() + static_cast<ptrdiff_t>(n), host_indices.end(), 0u);
    HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(indices.get(), host_indices.data(), 2 * n * sizeof(uint32_t),
                                        cudaMemcpyHostToDevice));
    cuda::RowBatch batch;
    batch.parts[0] = {plane(layer, part), 0, static_cast<std::byte*>(staging.get()), 0, 0, layout};
    batch.l1_rows = static_cast<const uint32_t*>(indices.get());
    batch.records = batch.l1_rows + n;
    batch.count = static_cast<uint32_t>(n);
    HIQ_ASSIGN_OR_RETURN(const cuda::KernelShape shape, cuda::kernel_shape(direction, &layout, 1));
    if (direction == cuda::Direction::kDecode)
      HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(staging.get(), host, bytes, cudaMemcpyHostToDevice));
    // The legacy default stream: ordered after every blocking stream's work,
    // and our callers have already waited for the transfers they depend on.
    HIQ_RETURN_IF_ERROR(cuda::launch_rows(direction, batch, shape, 132, nullptr));
    HIQ_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    if (direction == cuda::Direction::kEncode)
      HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(host, staging.get(), bytes, cudaMemcpyDeviceToHost));
    return Status::ok();
  }

  // Grows `buffer` to at least `bytes`. Every use synchronises before
  // returning, so nothing queued still reads the old buffer.
  static Status reserve(cuda::DeviceMemory& buffer, size_t& capacity, size_t bytes) {
    if (bytes <= capacity) return Status::ok();
    buffer.reset();
    capacity = 0;
    HIQ_ASSIGN_OR_RETURN(buffer, cuda::device_alloc(bytes, "L1 row staging"));
    capacity = bytes;
    return Status::ok();
  }

  cuda::DeviceMemory memory_;
  cuda::DeviceMemory staging_, indices_;  // read_rows/write_rows work areas, reused
  size_t staging_bytes_ = 0, indices_bytes_ = 0;
};

}  // namespace

Result<std::unique_ptr<DeviceKvPool>> make_cuda_device_kv_pool(const KvGeometry& geometry, size_t num_slots) {
  HIQ_RETURN_IF_ERROR(check_device_pool_request(geometry, num_slots));
  HIQ_RETURN_IF_ERROR(cuda::require_gpu());
  const size_t bytes = num_slots * geometry.l1_bytes_per_token();
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory memory, cuda::device_alloc(bytes, "L1 KV pool"));
  return std::unique_ptr<DeviceKvPool>(new CudaDeviceKvPool(geometry, num_slots, std::move(memory)));
}

Result<std::unique_ptr<DeviceKvPool>> make_cuda_device_kv_pool(int device, const KvGeometry& geometry,
                                                               size_t num_slots) {
  const cuda::DeviceScope scope(device);
  HIQ_RETURN_IF_ERROR(scope.status());
  return make_cuda_device_kv_pool(geometry, num_slots);
}

}  // namespace hiq
