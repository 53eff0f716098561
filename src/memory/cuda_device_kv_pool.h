// memory/cuda_device_kv_pool.h — the GPU side of the tiers, in host-only terms.
//
// - make_cuda_device_kv_pool: L1 in GPU memory (one cudaMalloc), the planes of
//   DeviceKvPool's layout. plane() returns device pointers; read_rows and
//   write_rows gather and scatter on the GPU.
// - PinnedHostMemory: registers an existing host range (the L2 pool's mapping)
//   with CUDA as pinned and mapped, so copy engines and kernels reach it over
//   PCIe at full speed: one registration of the exact range (no rounding up),
//   or, where the system refuses one that large, chunks of kChunkBytes. It is
//   undone when the object dies.
//
// Served by memory/cuda/*.cu in a CUDA build, and by a stub that answers
// kUnavailable otherwise.
#pragma once

#include <cstddef>
#include <memory>

#include "core/status.h"
#include "memory/device_kv_pool.h"

namespace hiq {

// L1 on the current CUDA device: `num_slots` token slots of `geometry`.
// Errors: a bad geometry or zero slots (kInvalidArgument), no GPU
// (kUnavailable), not enough device memory (kResourceExhausted).
Result<std::unique_ptr<DeviceKvPool>> make_cuda_device_kv_pool(const KvGeometry& geometry, size_t num_slots);
// The same on GPU `device` (a tensor-parallel rank's); the current device is
// left as it was.
Result<std::unique_ptr<DeviceKvPool>> make_cuda_device_kv_pool(int device, const KvGeometry& geometry,
                                                               size_t num_slots);

class PinnedHostMemory {
 public:
  // Bytes per cudaHostRegister call when one call for the whole range fails.
  static constexpr size_t kChunkBytes = size_t{1} << 30;

  PinnedHostMemory() = default;
  ~PinnedHostMemory();
  PinnedHostMemory(PinnedHostMemory&& other) noexcept;
  PinnedHostMemory& operator=(PinnedHostMemory&& other) noexcept;
  PinnedHostMemory(const PinnedHostMemory&) = delete;
  PinnedHostMemory& operator=(const PinnedHostMemory&) = delete;

  // Pins [data, data + bytes) (page-aligned `data`) and maps it into the
  // device's address space at the same address. Errors say what failed: no
  // GPU, a device that cannot map host memory, or a registration the system
  // refused (often the locked-memory limit: `ulimit -l`); nothing stays
  // registered after an error.
  // `chunk_bytes` > 0 skips the whole-range attempt and registers chunks of
  // that size (tests use it to exercise the fallback).
  static Result<PinnedHostMemory> pin(std::byte* data, size_t bytes, size_t chunk_bytes = 0);

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  // Bytes per registration: size() when registered whole.
  size_t chunk_bytes() const { return chunk_; }

 private:
  void release();
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  size_t chunk_ = 0;
};

}  // namespace hiq
