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

SimRunner::SimRunner(DeviceKvPool& l1, const HostKvPool* l2, TransferEngine* engine, SimRunnerOptions options)
    : l1_(l1),
      l2_(l2),
      engine_(engine),
      options_(options),
      rows_per_token_(l1.geometry().num_layers * l1.geometry().rows_per_layer()) {
  const size_t row_bytes = std::max(l1.row_elements(KvPart::kK), l1.row_elements(KvPart::kV)) * 2;
  chunk_tokens_ = std::max<size_t>(1, kChunkBytes / std::max<size_t>(1, row_bytes));
  rows_.resize(chunk_tokens_ * row_bytes / 2);
  checked_call_.assign(l1.num_slots(), 0);
  checked_hash_.assign(l1.num_slots(), 0);
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
    exact_.push_back(std::move(rows));
  }
  // Through each rung of L2 in turn: rung 0's round trip of the exact rows,
  // then each lower rung's of the one above (what demotion does); and, for a
  // ladder, the last rung's of the exact rows (a backup outside rung 0's
  // band is written there directly).
  const int variants = l2 == nullptr ? 0 : l2->rungs() + (l2->tiered() ? 1 : 0);
  for (int v = 0; v < variants; ++v)
    for (int r = 0; r < rows_per_token_; ++r) {
      const auto part = static_cast<KvPart>(r % parts);
      const size_t n = l1.row_elements(part);
      const bool direct = v == l2->rungs();
      const RecordLayout& layout = l2->layout(part, direct ? l2->rungs() - 1 : v);
      const std::vector<uint16_t>& from = v == 0 || direct
                                              ? exact_[static_cast<size_t>(r)]
                                              : restored_[static_cast<size_t>((v - 1) * rows_per_token_ + r)];
      std::vector<std::byte> records(layout.record_bytes * kPatterns);
      std::vector<uint16_t> back(from.size());
      encode_rows(layout, from.data(), n, kPatterns, records.data());
      decode_rows(layout, records.data(), kPatterns, back.data(), n);
      restored_.push_back(std::move(back));
    }
  variants_ = variants;
  // The first values of every pattern row, exact then (with L2) restored,
  // zero-padded: a decode step's expected samples, small enough to stay cached.
  const size_t patterns = kPatterns, rows = static_cast<size_t>(rows_per_token_);
  samples_.resize(static_cast<size_t>(1 + variants_) * rows * patterns);
  for (size_t i = 0; i < samples_.size(); ++i) {
    const auto r = static_cast<int>(i / patterns % rows);
    const auto tier = static_cast<int>(i / (patterns * rows));  // 0: exact; 1 + v: restored_'s variant v
    const size_t elements = l1.row_elements(static_cast<KvPart>(r % parts));
    const uint16_t* row = tier == 0 ? exact(r, i % patterns) : restored(r, i % patterns, tier - 1);
    std::memcpy(samples_[i].data(), row, std::min(elements, kSampleElements) * 2);
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

const uint16_t* SimRunner::restored(int row_index, size_t p, int variant) const {
  const auto part = static_cast<KvPart>(row_index % l1_.geometry().rows_per_layer());
  return restored_[static_cast<size_t>(variant * rows_per_token_ + row_index)].data() + p * l1_.row_elements(part);
}

bool SimRunner::restored_matches(const uint16_t* actual, int row_index, size_t p, size_t elements) const {
  for (int v = 0; v < variants_; ++v)
    if (std::memcmp(actual, restored(row_index, p, v), elements * 2) == 0) return true;
  return false;
}

Status SimRunner::verify(std::span<const SlotId> slots, std::span<const uint64_t> hashes, int first_row,
                         int last_row, bool count_tokens) {
  const int parts = l1_.geometry().rows_per_layer();
  const auto rows_checked = static_cast<uint64_t>(last_row - first_row);
  for (size_t begin = 0; begin < slots.size(); begin += chunk_tokens_) {
    const size_t n = std::min(chunk_tokens_, slots.size() - begin);
    const std::span<const SlotId> chunk = slots.subspan(begin, n);
    // Row index by row index (one read per (layer, part)), keeping the first
    // wrong row in (token, row) order: the error a token-by-token scan gives.
    size_t bad_token = n;
    int bad_row = last_row;
    for (int r = first_row; r < last_row && bad_token > 0; ++r) {
      const int layer = r / parts;
      const auto part = static_cast<KvPart>(r % parts);
      const size_t elements = l1_.row_elements(part);
      HIQ_RETURN_IF_ERROR(l1_.read_rows(layer, part, chunk, rows_.data()));
      // Tokens past the first wrong one so far are no longer of interest.
      for (size_t i = 0; i < bad_token; ++i) {
        const uint16_t* actual = rows_.data() + i * elements;
        const size_t p = pattern(hashes[begin + i], r);
        if (std::memcmp(actual, exact(r, p), elements * 2) == 0) continue;
        if (restored_matches(actual, r, p, elements)) continue;
        bad_token = i;
        bad_row = r;
        break;
      }
    }
    if (bad_token < n) {
      stats_.verified_rows += bad_token * rows_checked + static_cast<uint64_t>(bad_row - first_row + 1);
      if (count_tokens) stats_.verified_tokens += bad_token;
      const auto part = static_cast<KvPart>(bad_row % parts);
      return internal_error("simulated model read wrong KV: token " + std::to_string(begin + bad_token) +
                            " in slot " + std::to_string(chunk[bad_token]) + ", layer " +
                            std::to_string(bad_row / parts) + (part == KvPart::kK ? " K" : " V"));
    }
    stats_.verified_rows += n * rows_checked;
    if (count_tokens) stats_.verified_tokens += n;
  }
  return Status::ok();
}

Status SimRunner::verify_samples(std::span<const SlotId> slots, std::span<const uint64_t> hashes,
                                 std::span<const size_t> positions) {
  const int parts = l1_.geometry().rows_per_layer();
  const size_t n = slots.size();
  // Row index by row index (one plane at a time, slots mostly ascending),
  // keeping the first wrong row in (token, row) order as verify() does. The
  // rows are 2 KiB apart (Qwen3-8B): each sample is a cache miss, so the
  // samples of later tokens are fetched ahead.
  constexpr size_t kAhead = 16;
  const size_t patterns = kPatterns;
  size_t bad_token = n;
  int bad_row = rows_per_token_;
  for (int r = 0; r < rows_per_token_ && bad_token > 0; ++r) {
    const auto part = static_cast<KvPart>(r % parts);
    const size_t elements = l1_.row_elements(part);
    const size_t sample_bytes = std::min(elements, kSampleElements) * 2;
    const uint16_t* plane = l1_.plane(r / parts, part);
    const RowSample* expected = samples_.data() + static_cast<size_t>(r) * patterns;
    for (size_t i = 0; i < bad_token; ++i) {
      if (i + kAhead < bad_token) __builtin_prefetch(plane + static_cast<size_t>(slots[i + kAhead]) * elements);
      RowSample actual{};
      std::memcpy(actual.data(), plane + static_cast<size_t>(slots[i]) * elements, sample_bytes);
      const size_t p = pattern(hashes[i], r);
      if (actual == expected[p]) continue;
      bool restored = false;
      for (int v = 0; v < variants_ && !restored; ++v)
        restored = actual == expected[static_cast<size_t>(1 + v) * patterns * static_cast<size_t>(rows_per_token_) + p];
      if (restored) continue;
      bad_token = i;
      bad_row = r;
      break;
    }
  }
  const auto rows = static_cast<uint64_t>(rows_per_token_);
  if (bad_token == n) {
    stats_.verified_rows += n * rows;
    stats_.sampled_rows += n * rows;
    return Status::ok();
  }
  const uint64_t checked = bad_token * rows + static_cast<uint64_t>(bad_row + 1);
  stats_.verified_rows += checked;
  stats_.sampled_rows += checked;
  const auto part = static_cast<KvPart>(bad_row % parts);
  return internal_error("simulated model read wrong KV: token " + std::to_string(positions[bad_token]) + " in slot " +
                        std::to_string(slots[bad_token]) + ", layer " + std::to_string(bad_row / parts) +
                        (part == KvPart::kK ? " K" : " V"));
}

Status SimRunner::verify_decode(std::span<const SlotId> slots, std::span<const uint64_t> hashes) {
  if (options_.verify_every_decode_row || !l1_.host_accessible())
    return verify(slots, hashes, 0, rows_per_token_, /*count_tokens=*/false);
  // A slot shared by several requests of the step (a common prefix) is
  // checked once for the token it holds; read as another token, again.
  sample_slots_.clear();
  sample_hashes_.clear();
  sample_positions_.clear();
  for (size_t i = 0; i < slots.size(); ++i) {
    const auto slot = static_cast<size_t>(slots[i]);
    if (slot < checked_call_.size() && checked_call_[slot] == stats_.forward_calls && checked_hash_[slot] == hashes[i])
      continue;
    if (slot < checked_call_.size()) {
      checked_call_[slot] = stats_.forward_calls;
      checked_hash_[slot] = hashes[i];
    }
    sample_slots_.push_back(slots[i]);
    sample_hashes_.push_back(hashes[i]);
    sample_positions_.push_back(i);
  }
  return verify_samples(sample_slots_, sample_hashes_, sample_positions_);
}

Status SimRunner::write(std::span<const SlotId> slots, std::span<const uint64_t> hashes) {
  const int parts = l1_.geometry().rows_per_layer();
  for (size_t begin = 0; begin < slots.size(); begin += chunk_tokens_) {
    const size_t n = std::min(chunk_tokens_, slots.size() - begin);
    for (int r = 0; r < rows_per_token_; ++r) {
      const auto part = static_cast<KvPart>(r % parts);
      const size_t elements = l1_.row_elements(part);
      for (size_t i = 0; i < n; ++i)
        std::memcpy(rows_.data() + i * elements, exact(r, pattern(hashes[begin + i], r)), elements * 2);
      HIQ_RETURN_IF_ERROR(l1_.write_rows(r / parts, part, slots.subspan(begin, n), rows_.data()));
    }
  }
  return Status::ok();
}

Result<std::vector<ForwardResult>> SimRunner::forward(std::span<const ForwardItem> batch) {
  ++stats_.forward_calls;
  const KvGeometry& g = l1_.geometry();
  std::vector<ForwardResult> next;
  size_t new_tokens = 0, restored_tokens = 0;
  double attention_pairs = 0, context_tokens = 0;  // what the batch-dependent costs count
  bool prefill = false;
  for (const ForwardItem& item : batch) {
    if (item.slots.size() != item.tokens.size() || item.first_new > item.tokens.size())
      return invalid_argument("forward: an item's slots do not match its tokens");
    // Restored layers are read only once their transfer reports them done.
    if (item.load) {
      for (int layer = 0; layer < g.num_layers; ++layer) HIQ_RETURN_IF_ERROR(engine_->wait_layer(*item.load, layer));
      const size_t restored = item.restored_end - item.restored_begin;
      stats_.restored_tokens_read += restored;
      restored_tokens += restored;
    }
    // Every cached row attention reads is checked: a prefill compares every
    // row in full; a decode step checks every row of its context too, by its
    // first values (in full when asked, or when L1 is not in host memory).
    hashes_.resize(item.tokens.size());
    uint64_t h = kHashSeed;  // the prefix hash, extended token by token
    for (size_t p = 0; p < item.tokens.size(); ++p) hashes_[p] = h = extend_hash(h, item.tokens[p]);
    const std::span<const uint64_t> hashes(hashes_);
    const std::span<const SlotId> cached = item.slots.first(item.first_new);
    if (item.decode) {
      HIQ_RETURN_IF_ERROR(verify_decode(cached, hashes.first(item.first_new)));
    } else {
      HIQ_RETURN_IF_ERROR(verify(cached, hashes.first(item.first_new), 0, rows_per_token_, /*count_tokens=*/true));
    }
    // The "model" computes the new tokens' KV.
    HIQ_RETURN_IF_ERROR(write(item.slots.subspan(item.first_new), hashes.subspan(item.first_new)));
    const size_t computed = item.tokens.size() - item.first_new;
    new_tokens += computed;
    prefill |= !item.decode;
    // New tokens first_new … size − 1 attend to positions 0 … themselves.
    const auto total = static_cast<double>(item.tokens.size()), old = static_cast<double>(item.first_new);
    attention_pairs += (total * (total + 1) - old * (old + 1)) / 2;
    context_tokens += total;
    stats_.computed_tokens += computed;
    next.push_back({static_cast<TokenId>(mix(h) % static_cast<uint64_t>(options_.vocab_size)), std::nullopt, {}});
  }
  // Virtual time: compute and restore overlap layer by layer.
  const SimCostModel& cost = options_.cost;
  const double compute =
      prefill ? static_cast<double>(new_tokens) / cost.prefill_tokens_per_s + attention_pairs * cost.prefill_pair_s
              : cost.decode_step_s + context_tokens * cost.decode_context_token_s;
  const double restore = transfer_seconds(restored_tokens);
  const double layers = static_cast<double>(g.num_layers);
  clock_ += std::max(compute, restore) + std::min(compute, restore) / layers;
  stats_.compute_seconds += compute;
  stats_.restore_seconds += restore;
  return next;
}

// Fitted to `hiq bench model` on the H200 (Qwen3-8B, docs/benchmarks.md,
// 2026-12-04): a decode step's CUDA-graph time grows by 0.0498 ms per 1,000
// context tokens of the batch (5.27 ms at batch 1 to 8.43 ms at batch 32,
// 2,048 tokens each); a fresh prompt of N tokens takes 2.36e-5 · N + 1.0e-9 ·
// N(N + 1)/2 seconds (50.5, 222.7 and 522.0 ms at 2K, 8K and 16K: the second
// term is causal attention). The fixed parts are then set so that the
// reference point of the defaults stays where `hiq bench serve` measured it:
// a decode step of 8 requests at 2K context 7.05 ms, a 2,112-token prompt
// at 38,000 tokens/s.
SimCostModel SimCostModel::batch_dependent() {
  SimCostModel c;
  c.decode_context_token_s = 4.98e-8;
  c.decode_step_s = 0.00705 - 8 * 2048 * c.decode_context_token_s;
  c.prefill_pair_s = 1.0e-9;
  constexpr double kReferencePrompt = 2112;
  const double pairs = kReferencePrompt * (kReferencePrompt + 1) / 2;
  c.prefill_tokens_per_s = kReferencePrompt / (kReferencePrompt / 38000 - pairs * c.prefill_pair_s);
  return c;
}

double SimRunner::transfer_seconds(size_t tokens) const {
  const SimCostModel& cost = options_.cost;
  const double bytes = static_cast<double>(tokens * (l2_ ? l2_->bytes_per_token() : 0));
  const double bf16_bytes = static_cast<double>(tokens * l1_.geometry().l1_bytes_per_token());
  return bytes / cost.pcie_bytes_per_s + bf16_bytes / cost.codec_bytes_per_s;
}

void SimRunner::waited_for_transfers(size_t tokens) {
  const double seconds = transfer_seconds(tokens);
  clock_ += seconds;
  stats_.transfer_wait_seconds += seconds;
}

}  // namespace hiq
