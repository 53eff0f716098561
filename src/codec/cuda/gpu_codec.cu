#include "codec/cuda/gpu_codec.h"

#include <numeric>
#include <vector>

#include "codec/cuda/row_kernels.h"
#include "cuda/buffers.h"
#include "cuda/check.cuh"

namespace hiq::cuda {
namespace {

struct Buffers {
  DeviceMemory rows, records, indices, counters;
  RowBatch batch;
  KernelShape shape;
};

Result<Buffers> prepare(const RecordLayout& layout, size_t num_rows, Direction direction) {
  if (!layout.is_valid()) return invalid_argument("gpu codec: invalid record layout");
  if (num_rows > UINT32_MAX) return out_of_range("gpu codec: too many rows for one call");
  HIQ_RETURN_IF_ERROR(require_gpu());
  Buffers b;
  HIQ_ASSIGN_OR_RETURN(b.rows, device_alloc(num_rows * layout.shape.elements() * 2, "gpu codec rows"));
  HIQ_ASSIGN_OR_RETURN(b.records, device_alloc(num_rows * layout.record_bytes, "gpu codec records"));
  HIQ_ASSIGN_OR_RETURN(b.indices, device_alloc(num_rows * sizeof(uint32_t), "gpu codec indices"));
  HIQ_ASSIGN_OR_RETURN(b.counters, device_alloc(2 * sizeof(unsigned long long), "gpu codec counters"));
  std::vector<uint32_t> identity(num_rows);
  std::iota(identity.begin(), identity.end(), 0u);
  HIQ_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(b.indices.get(), identity.data(), num_rows * sizeof(uint32_t), cudaMemcpyHostToDevice));
  HIQ_CUDA_RETURN_IF_ERROR(cudaMemset(b.counters.get(), 0, 2 * sizeof(unsigned long long)));
  b.batch.parts[0] = {static_cast<uint16_t*>(b.rows.get()), 0, static_cast<std::byte*>(b.records.get()), 0, 0, layout};
  b.batch.l1_rows = b.batch.records = static_cast<const uint32_t*>(b.indices.get());
  b.batch.count = static_cast<uint32_t>(num_rows);
  b.batch.counters = static_cast<unsigned long long*>(b.counters.get());
  HIQ_ASSIGN_OR_RETURN(b.shape, kernel_shape(direction, &layout, 1));
  return Result<Buffers>(std::move(b));  // explicit: nvcc's front end does not move implicitly here
}

int all_multiprocessors() {
  int device = 0, sms = 1;
  (void)cudaGetDevice(&device);
  (void)cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  return sms;
}

}  // namespace

Status gpu_encode_rows(const RecordLayout& layout, const uint16_t* rows, size_t num_rows, std::byte* records,
                       CodecStats* stats) {
  if (num_rows == 0) return Status::ok();
  HIQ_ASSIGN_OR_RETURN(Buffers b, prepare(layout, num_rows, Direction::kEncode));
  HIQ_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(b.rows.get(), rows, num_rows * layout.shape.elements() * 2, cudaMemcpyHostToDevice));
  HIQ_RETURN_IF_ERROR(launch_rows(Direction::kEncode, b.batch, b.shape, all_multiprocessors(), nullptr));
  HIQ_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(records, b.records.get(), num_rows * layout.record_bytes, cudaMemcpyDeviceToHost));
  unsigned long long counters[2] = {};
  HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(counters, b.counters.get(), sizeof counters, cudaMemcpyDeviceToHost));
  if (stats) {
    stats->rows += num_rows;
    stats->nonfinite_heads += counters[0];
    stats->out_of_range_heads += counters[1];
  }
  return Status::ok();
}

Status gpu_decode_rows(const RecordLayout& layout, const std::byte* records, size_t num_rows, uint16_t* rows) {
  if (num_rows == 0) return Status::ok();
  HIQ_ASSIGN_OR_RETURN(Buffers b, prepare(layout, num_rows, Direction::kDecode));
  HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(b.records.get(), records, num_rows * layout.record_bytes, cudaMemcpyHostToDevice));
  HIQ_RETURN_IF_ERROR(launch_rows(Direction::kDecode, b.batch, b.shape, all_multiprocessors(), nullptr));
  HIQ_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(rows, b.rows.get(), num_rows * layout.shape.elements() * 2, cudaMemcpyDeviceToHost));
  return Status::ok();
}

}  // namespace hiq::cuda
