// cuda/buffers.h (internal to the CUDA backend) — RAII owners of CUDA
// resources: device memory, pinned host memory, streams and events. Each frees
// its resource when it dies; none is copyable.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

#include "core/status.h"

namespace hiq::cuda {

Status cuda_error(cudaError_t err, const std::string& what);

template <typename T, typename Deleter>
class Owned {
 public:
  Owned() = default;
  explicit Owned(T value) : value_(value) {}
  ~Owned() { reset(); }
  Owned(Owned&& o) noexcept : value_(std::exchange(o.value_, T{})) {}
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) {
      reset();
      value_ = std::exchange(o.value_, T{});
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;

  T get() const { return value_; }
  explicit operator bool() const { return value_ != T{}; }
  void reset() {
    if (value_ != T{}) Deleter{}(std::exchange(value_, T{}));
  }

 private:
  T value_{};
};

struct DeviceFree {
  void operator()(void* p) const { (void)cudaFree(p); }
};
struct HostFree {
  void operator()(void* p) const { (void)cudaFreeHost(p); }
};
struct StreamDestroy {
  void operator()(cudaStream_t s) const { (void)cudaStreamDestroy(s); }
};
struct EventDestroy {
  void operator()(cudaEvent_t e) const { (void)cudaEventDestroy(e); }
};

using DeviceMemory = Owned<void*, DeviceFree>;   // cudaMalloc
using PinnedMemory = Owned<void*, HostFree>;     // cudaMallocHost
using Stream = Owned<cudaStream_t, StreamDestroy>;
using Event = Owned<cudaEvent_t, EventDestroy>;

// kResourceExhausted when the device is out of memory, else the CUDA error.
Result<DeviceMemory> device_alloc(size_t bytes, const char* what);
Result<PinnedMemory> pinned_alloc(size_t bytes, const char* what);
// A non-blocking stream (never synchronises with the legacy default stream).
Result<Stream> make_stream();
Result<Event> make_event(bool timing);

// Remembers the current device and makes it current again at the end of the
// scope; with a device, makes that one current meanwhile (status() says
// whether it could). For work on several GPUs from one thread.
class DeviceScope {
 public:
  DeviceScope() { (void)cudaGetDevice(&previous_); }
  explicit DeviceScope(int device) : DeviceScope() { status_ = set(device); }
  ~DeviceScope() { (void)cudaSetDevice(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

  // Makes `device` current until the scope ends (or the next set()).
  Status set(int device) {
    const cudaError_t err = cudaSetDevice(device);
    return err == cudaSuccess ? Status::ok() : cuda_error(err, "cudaSetDevice");
  }
  const Status& status() const { return status_; }

 private:
  int previous_ = 0;
  Status status_;
};

// Selects a device and checks that one is usable; kUnavailable otherwise.
Status require_gpu();

}  // namespace hiq::cuda
