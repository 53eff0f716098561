#include "engine/sim_runner.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "codec/numeric.h"

namespace hiq {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

SimRunner::SimRunner(DeviceKvPool& l1, const HostKvPool* l2, TransferEngine* engine, SimCostModel cost, int vocab_size)
    : l1_(l1),
      l2_(l2),
      engine_(engine),
      cost_(cost),
      vocab_size_(vocab_size),
      rows_per_token_(l1.geometry().num_layers * l1.geometry().rows_per_layer()) {
  const int parts = l1.geometry().rows_per_layer();
  uint64_t x = 0x243F6A8885A308D3ull;
  for (int r = 0; r < rows_per_token_; ++r) {
    const auto part = static_cast<KvPart>(r % parts);
    const size_t n = l1.row_elements(part);
    std::vector<uint16_t> rows(n * kPatterns);
    for (auto& v : rows) {  // xorshift64*: values in (-4, 4) with varied magnitudes, like real K and V
      x ^= x >> 12;
      x ^= x << 25;
      x ^= x >> 27;
      const uint64_t u = x * 0x2545F4914F6CDD1Dull;
      const float unit = static_cast<float>(static_cast<int32_t>(u >> 40) - (1 << 23)) / static_cast<float>(1 << 23);
      v = numeric::float_to_bf16(unit * static_cast<float>(1 + (u & 3)));
    }
    if (l2) {
      const RecordLayout& layout = l2->layout(part);
      std::vector<std::byte> records(layout.record_bytes * kPatterns);
      std::vector<uint16_t> back(rows.size());
      encode_rows(layout, rows.data(), n, kPatterns, records.data());
      decode_rows(layout, records.data(), kPatterns, back.data(), n);
      restored_.push_back(std::move(back));
    }
    exact_.push_back(std::move(rows));
  }
}

namespace {
constexpr uint64_t kHashSeed = 0xcbf29ce484222325ull;
uint64_t extend_hash(uint64_t h, TokenId token) {  // FNV-1a over token ids
  return (h ^ static_cast<uint64_t>(static_cast<uint32_t>(token) + 1)) * 0x100000001b3ull;
}
}  // namespace

uint64_t SimRunner::prefix_hash(std::span<const TokenId> tokens, size_t p) {
  uint64_t h = kHashSeed;
  for (size_t i = 0; i <= p; ++i) h = extend_hash(h, tokens[i]);
  return h;
}

size_t SimRunner::pattern(uint64_t hash, int row_index) const {
  return mix(hash + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(row_index + 1)) % kPatterns;
}

const uint16_t* SimRunner::exact(int row_index, size_t p) const {
  const auto part = static_cast<KvPart>(row_index % l1_.geometry().rows_per_layer());
  return exact_[static_cast<size_t>(row_index)].data() + p * l1_.row_elements(part);
}

const uint16_t* SimRunner::restored(int row_index, size_t p) const {
  const auto part = static_cast<KvPart>(row_index % l1_.geometry().rows_per_layer());
  return restored_[static_cast<size_t>(row_index)].data() + p * l1_.row_elements(part);
}

Status SimRunner::verify(uint64_t hash, SlotId slot, int first_row, int last_row, size_t position) {
  const int parts = l1_.geometry().rows_per_layer();
  for (int r = first_row; r < last_row; ++r) {
    const int layer = r / parts;
    const auto part = static_cast<KvPart>(r % parts);
    const size_t bytes = l1_.row_elements(part) * 2;
    const uint16_t* actual = l1_.row(layer, part, slot);
    const size_t p = pattern(hash, r);
    ++stats_.verified_rows;
    if (std::memcmp(actual, exact(r, p), bytes) == 0) continue;
    if (l2_ && std::memcmp(actual, restored(r, p), bytes) == 0) continue;
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
    // Cached tokens read by attention are checked: a prefill checks every
    // row; a decode step one row per token, rotating through the rows.
    const bool decode_step = item.decode;
    const int first_row = decode_step ? static_cast<int>(decode_steps_ % static_cast<uint64_t>(rows_per_token_)) : 0;
    const int last_row = decode_step ? first_row + 1 : rows_per_token_;
    uint64_t h = kHashSeed;  // the prefix hash, extended token by token
    for (size_t p = 0; p < item.first_new; ++p) {
      h = extend_hash(h, item.tokens[p]);
      HIQ_RETURN_IF_ERROR(verify(h, item.slots[p], first_row, last_row, p));
      if (!decode_step) ++stats_.verified_tokens;
    }
    // The "model" computes the new tokens' KV.
    const int parts = g.rows_per_layer();
    for (size_t p = item.first_new; p < item.tokens.size(); ++p) {
      h = extend_hash(h, item.tokens[p]);
      for (int r = 0; r < rows_per_token_; ++r) {
        const auto part = static_cast<KvPart>(r % parts);
        std::memcpy(l1_.row(r / parts, part, item.slots[p]), exact(r, pattern(h, r)), l1_.row_elements(part) * 2);
      }
    }
    const size_t computed = item.tokens.size() - item.first_new;
    new_tokens += computed;
    prefill |= !item.decode;
    stats_.computed_tokens += computed;
    next.push_back(static_cast<TokenId>(mix(h) % static_cast<uint64_t>(vocab_size_)));
  }
  if (!prefill) ++decode_steps_;
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
