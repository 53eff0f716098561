#include "memory/device_kv_pool.h"

#include <cstring>
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

Status DeviceKvPool::check_rows(int layer, KvPart part, std::span<const SlotId> slots) const {
  if (layer < 0 || layer >= geometry_.num_layers)
    return out_of_range("layer " + std::to_string(layer) + " of a " + std::to_string(geometry_.num_layers) +
                        "-layer pool");
  if (static_cast<int>(part) >= geometry_.rows_per_layer()) return invalid_argument("an MLA pool has no V rows");
  for (SlotId s : slots)
    if (s >= num_slots_) return out_of_range("slot " + std::to_string(s) + " beyond the pool");
  return Status::ok();
}

Status DeviceKvPool::read_rows(int layer, KvPart part, std::span<const SlotId> slots, uint16_t* out) {
  if (!host_accessible()) return failed_precondition("this pool's rows are not in host memory");
  HIQ_RETURN_IF_ERROR(check_rows(layer, part, slots));
  const size_t n = row_elements(part);
  for (size_t i = 0; i < slots.size(); ++i) std::memcpy(out + i * n, row(layer, part, slots[i]), n * 2);
  return Status::ok();
}

Status DeviceKvPool::write_rows(int layer, KvPart part, std::span<const SlotId> slots, const uint16_t* rows) {
  if (!host_accessible()) return failed_precondition("this pool's rows are not in host memory");
  HIQ_RETURN_IF_ERROR(check_rows(layer, part, slots));
  const size_t n = row_elements(part);
  for (size_t i = 0; i < slots.size(); ++i) std::memcpy(row(layer, part, slots[i]), rows + i * n, n * 2);
  return Status::ok();
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

Status check_device_pool_request(const KvGeometry& geometry, size_t num_slots) {
  HIQ_RETURN_IF_ERROR(geometry.validate());
  if (num_slots == 0) return invalid_argument("--max-total-tokens must be positive");
  if (num_slots > std::numeric_limits<SlotId>::max())
    return out_of_range("--max-total-tokens " + std::to_string(num_slots) + " exceeds 2^32-1 slots");
  return Status::ok();
}

Result<std::unique_ptr<DeviceKvPool>> make_host_memory_device_pool(const KvGeometry& geometry, size_t num_slots) {
  HIQ_RETURN_IF_ERROR(check_device_pool_request(geometry, num_slots));
  const size_t bytes = num_slots * geometry.l1_bytes_per_token();
  HIQ_ASSIGN_OR_RETURN(MappedRegion memory, MappedRegion::reserve(bytes, /*populate=*/true));
  return std::unique_ptr<DeviceKvPool>(new HostMemoryDevicePool(geometry, num_slots, std::move(memory)));
}

}  // namespace hiq
