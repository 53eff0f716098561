#include <algorithm>
#include <string>

#include "cuda/buffers.h"
#include "cuda/check.cuh"
#include "memory/cuda_device_kv_pool.h"

namespace hiq {

PinnedHostMemory::~PinnedHostMemory() { release(); }

PinnedHostMemory::PinnedHostMemory(PinnedHostMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      chunk_(std::exchange(other.chunk_, 0)) {}

PinnedHostMemory& PinnedHostMemory::operator=(PinnedHostMemory&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    chunk_ = std::exchange(other.chunk_, 0);
  }
  return *this;
}

void PinnedHostMemory::release() {
  for (size_t offset = 0; offset < size_; offset += chunk_) (void)cudaHostUnregister(data_ + offset);
  data_ = nullptr;
  size_ = 0;
}

Result<PinnedHostMemory> PinnedHostMemory::pin(std::byte* data, size_t bytes, size_t chunk_bytes) {
  if (data == nullptr || bytes == 0) return invalid_argument("pin: an empty range");
  HIQ_RETURN_IF_ERROR(cuda::require_gpu());
  int device = 0, can_map = 0, same_address = 0;
  HIQ_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  HIQ_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, device));
  HIQ_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&same_address, cudaDevAttrCanUseHostPointerForRegisteredMem, device));
  if (!can_map || !same_address)
    return unavailable("this GPU cannot map pinned host memory at its host address (zero-copy L2 needs it)");
  PinnedHostMemory pinned;
  pinned.data_ = data;
  // One registration, so copy engines may cross any offset of the range. Where
  // the system refuses one that large, chunks: kernels still see one range
  // (mapped at the same addresses), but a single cudaMemcpy must then not
  // cross a chunk boundary; the transfer engine never issues such copies.
  if (chunk_bytes == 0 &&
      cudaHostRegister(data, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable) == cudaSuccess) {
    pinned.size_ = bytes;
    pinned.chunk_ = bytes;
    return Result<PinnedHostMemory>(std::move(pinned));  // explicit: nvcc's front end does not move implicitly here
  }
  (void)cudaGetLastError();
  pinned.chunk_ = chunk_bytes ? chunk_bytes : kChunkBytes;
  // `size_` counts what is registered, so an error part-way unregisters exactly that.
  for (size_t offset = 0; offset < bytes; offset += pinned.chunk_) {
    const size_t n = std::min(pinned.chunk_, bytes - offset);
    const cudaError_t err =
        cudaHostRegister(data + offset, n, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return resource_exhausted("cannot pin " + std::to_string(bytes) + " bytes of host memory for the GPU (" +
                                cudaGetErrorString(err) + " at byte " + std::to_string(offset) +
                                "); the locked-memory limit (ulimit -l) or the machine's memory may be too small");
    }
    pinned.size_ = offset + n;
  }
  return Result<PinnedHostMemory>(std::move(pinned));  // explicit: nvcc's front end does not move implicitly here
}

}  // namespace hiq
