// memory/device_kv_pool.h — L1: the KV pool attention reads.
//
// Layout, layer-first: for each layer, a K plane and (MHA) a V plane; a plane
// holds `num_slots` rows of `heads × head_dim` elements of the L1 dtype, row r
// for slot r:
//
//   [layer 0: K plane | V plane][layer 1: K plane | V plane] …
//
// A layer's rows are contiguous, so a per-layer transfer touches one region.
// This interface has a host-memory implementation (the CPU backend, and the
// simulator) and a CUDA one (memory/cuda_device_kv_pool.h) with the same planes
// in device memory.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "core/status.h"
#include "kv/geometry.h"
#include "memory/slot_allocator.h"

namespace hiq {

class DeviceKvPool {
 public:
  virtual ~DeviceKvPool() = default;

  const KvGeometry& geometry() const { return geometry_; }
  size_t num_slots() const { return num_slots_; }
  SlotAllocator& allocator() { return allocator_; }
  const SlotAllocator& allocator() const { return allocator_; }

  // Elements of one row of `part` (0 for the V part of an MLA model).
  size_t row_elements(KvPart part) const { return geometry_.row_shape(part).elements(); }
  // The first row of a (layer, part) plane; rows follow each other, unpadded.
  virtual uint16_t* plane(int layer, KvPart part) = 0;
  uint16_t* row(int layer, KvPart part, SlotId slot) { return plane(layer, part) + slot * row_elements(part); }
  // Whether plane() may be dereferenced by the CPU.
  virtual bool host_accessible() const = 0;

  // Copies row `slots[i]` of (layer, part) to `out + i * row_elements(part)`,
  // and back. For callers outside the data path (the simulated model, tests,
  // diagnostics): a CUDA pool gathers on the device and synchronises. Errors: a
  // layer or slot out of range, a failed device copy.
  virtual Status read_rows(int layer, KvPart part, std::span<const SlotId> slots, uint16_t* out);
  virtual Status write_rows(int layer, KvPart part, std::span<const SlotId> slots, const uint16_t* rows);
  // Bytes the pool holds: num_slots × the geometry's bytes per token.
  size_t bytes() const { return num_slots_ * geometry_.l1_bytes_per_token(); }

 protected:
  DeviceKvPool(const KvGeometry& geometry, size_t num_slots)
      : geometry_(geometry), num_slots_(num_slots), allocator_(num_slots) {}
  // Offset of a plane, in elements, from the start of one contiguous buffer.
  size_t plane_offset(int layer, KvPart part) const;
  // The checks of read_rows/write_rows.
  Status check_rows(int layer, KvPart part, std::span<const SlotId> slots) const;

 private:
  KvGeometry geometry_;
  size_t num_slots_;
  SlotAllocator allocator_;
};

// The checks every L1 pool factory makes: a valid geometry, and from 1 to
// 2^32-1 slots (--max-total-tokens).
Status check_device_pool_request(const KvGeometry& geometry, size_t num_slots);

// An L1 pool in host memory (--max-total-tokens slots). kInvalidArgument for a
// bad geometry or zero slots; kResourceExhausted when the memory is not there.
Result<std::unique_ptr<DeviceKvPool>> make_host_memory_device_pool(const KvGeometry& geometry, size_t num_slots);

}  // namespace hiq
