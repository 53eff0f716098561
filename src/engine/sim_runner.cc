#include "engine/sim_runner.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "codec/numeric.h"

namespace hiq {

SimRunner::SimRunner(DeviceKvPool& l1, const HostKvPool* l2, TransferEngine* engine, SimCostModel cost, int vocab_size)
    : l1_(l1), l2_(l2), engine_(engine), cost_(cost), vocab_size_(vocab_size) {
  size_t widest = l1.row_elements(KvPart::kK);
  if (l1.geometry().attention == AttentionKind::kMha) widest = std::max(widest, l1.row_elements(KvPart::kV));
  expected_.resize(widest);
  restored_.resize(widest);
  if (l2) record_.resize(std::max(l2->layout(KvPart::kK).record_bytes, l2->layout(KvPart::kV).record_bytes));
}

uint64_t SimRunner::prefix_hash(std::span<const TokenId> tokens, size_t p) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i <= p; ++i) h = (h ^ static_cast<uint64_t>(static_cast<uint32_t>(tokens[i]) + 1)) * 0x100000001b3ull;
  return h;
}

void SimRunner::synthesize(uint64_t hash, int layer, KvPart part, std::span<uint16_t> row) const {
  // xorshift64*: cheap, and every (prefix, layer, part) gets its own stream.
  uint64_t x = hash ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(2 * layer + static_cast<int>(part) + 1));
  for (auto& v : row) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    const uint64_t r = x * 0x2545F4914F6CDD1Dull;
    // Roughly unit-scale values with varied magnitudes, like real K and V.
    const float u = static_cast<float>(static_cast<int32_t>(r >> 40) - (1 << 23)) / static_cast<float>(1 << 23);
    v = numeric::float_to_bf16(u * static_cast<float>(1 + (r & 3)));
  }
}

Status SimRunner::verify(uint64_t hash, SlotId slot, bool may_be_restored, size_t position) {
  const KvGeometry& g = l1_.geometry();
  for (int layer = 0; layer < g.num_layers; ++layer)
    for (int p = 0; p < g.rows_per_layer(); ++p) {
      const auto part = static_cast<KvPart>(p);
      const size_t n = l1_.row_elements(part);
      const std::span<uint16_t> expected(expected_.data(), n);
      synthesize(hash, layer, part, expected);
      const uint16_t* actual = l1_.row(layer, part, slot);
      if (std::memcmp(actual, expected.data(), n * 2) == 0) continue;
      if (may_be_restored && l2_) {
        const RecordLayout& layout = l2_->layout(part);
        encode_rows(layout, expected.data(), n, 1, record_.data());
        decode_rows(layout, record_.data(), 1, restored_.data(), n);
        if (std::memcmp(actual, restored_.data(), n * 2) == 0) continue;
      }
      return internal_error("simulated model read wrong KV: token " + std::to_string(position) + " in slot " +
                            std::to_string(slot) + ", layer " + std::to_string(layer) +
                            (part == KvPart::kK ? " K" : " V"));
    }
  return Status::ok();
}

Result<std::vector<TokenId>> SimRunner::forward(std::span<const ForwardItem> batch) {
  ++stats_.forward_calls;
  const KvGeometry& g = l1_.geometry();
  std::vector<TokenId> next;
  size_t new_tokens = 0, restored_bytes = 0, restored_bf16_bytes = 0;
  bool prefill = false;
  for (const ForwardItem& item : batch) {
    if (item.slots.size() != item.tokens.size() || item.first_new > item.tokens.size())
      return invalid_argument("forward: an item's slots do not match its tokens");
    // Restored layers are read only once their transfer reports them done.
    if (item.load) {
      for (int layer = 0; layer < g.num_layers; ++layer) HIQ_RETURN_IF_ERROR(engine_->wait_layer(*item.load, layer));
      const size_t restored = item.restored_end - item.restored_begin;
      stats_.restored_tokens_read += restored;
      if (l2_) restored_bytes += restored * l2_->bytes_per_token();
      restored_bf16_bytes += restored * g.l1_bytes_per_token();
    }
    // Every cached token read by attention is checked.
    for (size_t p = 0; p < item.first_new; ++p) {
      HIQ_RETURN_IF_ERROR(verify(prefix_hash(item.tokens, p), item.slots[p], /*may_be_restored=*/true, p));
      ++stats_.verified_tokens;
    }
    // The "model" computes the new tokens' KV.
    for (size_t p = item.first_new; p < item.tokens.size(); ++p) {
      const uint64_t h = prefix_hash(item.tokens, p);
      for (int layer = 0; layer < g.num_layers; ++layer)
        for (int part = 0; part < g.rows_per_layer(); ++part) {
          const size_t n = l1_.row_elements(static_cast<KvPart>(part));
          synthesize(h, layer, static_cast<KvPart>(part), std::span(l1_.row(layer, static_cast<KvPart>(part), item.slots[p]), n));
        }
    }
    const size_t computed = item.tokens.size() - item.first_new;
    new_tokens += computed;
    prefill |= computed > 1;
    stats_.computed_tokens += computed;
    const uint64_t last = prefix_hash(item.tokens, item.tokens.size() - 1);
    next.push_back(static_cast<TokenId>(last % static_cast<uint64_t>(vocab_size_)));
  }
  // Virtual time: compute and restore overlap layer by layer.
  const double compute = prefill ? static_cast<double>(new_tokens) / cost_.prefill_tokens_per_s : cost_.decode_step_s;
  const double restore = static_cast<double>(restored_bytes) / cost_.pcie_bytes_per_s +
                         static_cast<double>(restored_bf16_bytes) / cost_.codec_bytes_per_s;
  const double layers = static_cast<double>(g.num_layers);
  clock_ += std::max(compute, restore) + std::min(compute, restore) / layers;
  stats_.compute_seconds += compute;
  stats_.restore_seconds += restore;
  return next;
}

}  // namespace hiq
