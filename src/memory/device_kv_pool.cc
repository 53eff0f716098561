#include "memory/device_kv_pool.h"

#include <limits>
#include <string>

#include "core/check.h"
#include "memory/mapped_region.h"

namespace hiq {

size_t DeviceKvPool::plane_offset(int layer, KvPart part) const {
  HIQ_DCHECK(layer >= 0 && layer < geometry_.num_layers);
  const size_t k = num_slots_ * row_elements(KvPart::kK);
  const size_t v = geometry_.attention == AttentionKind::kMha ? num_slots_ * row_elements(KvPart::kV) : 0;
  return static_cast<size_t>(layer) * (k + v) + (part == KvPart::kV ? k : 0);
}

namespace {

class HostMemoryDevicePool final : public DeviceKvPool {
 public:
  HostMemoryDevicePool(const KvGeometry& geometry, size_t num_slots, MappedRegion memory)
      : DeviceKvPool(geometry, num_slots), memory_(std::move(memory)) {}

  uint16_t* plane(int layer, KvPart part) override {
    return reinterpret_cast<uint16_t*>(memory_.data()) + plane_offset(layer, part);
  }
  bool host_accessible() const override { return true; }

 private:
  MappedRegion memory_;
};

}  // namespace

Result<std::unique_ptr<DeviceKvPool>> make_host_memory_device_pool(const KvGeometry& geometry, size_t num_slots) {
  HIQ_RETURN_IF_ERROR(geometry.validate());
  if (num_slots == 0) return invalid_argument("--max-total-tokens must be positive");
  if (num_slots > std::numeric_limits<SlotId>::max())
    return out_of_range("--max-total-tokens " + std::to_string(num_slots) + " exceeds 2^32-1 slots");
  const size_t bytes = num_slots * geometry.l1_bytes_per_token();
  HIQ_ASSIGN_OR_RETURN(MappedRegion memory, MappedRegion::reserve(bytes, /*populate=*/true));
  return std::unique_ptr<DeviceKvPool>(new HostMemoryDevicePool(geometry, num_slots, std::move(memory)));
}

}  // namespace hiq
