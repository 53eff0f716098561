// engine/sim_runner.h — a model stand-in for the simulator and the tests.
//
// It writes deterministic synthetic KV into L1 and checks it on every read.
// Each (layer, K|V) has a pool of 64 random rows (Gaussian-like, varied
// magnitudes); the row a token gets is chosen by a hash of the whole prefix up
// to it, the layer and the part, so KV served for the wrong prefix, position,
// layer or slot is (with probability 63/64 per row, over many rows: surely) a
// different row. The pools and their codec round trips are computed once, so
// writing a token is a copy and checking it a comparison, at memory speed:
// full-size runs stay fast with real bytes.
//
// Checks: a prefill compares every row of every cached token it reads with the
// expected row, or — for KV restored from L2 — with the codec's exact round
// trip of it. A decode step reads its whole context again; it compares one
// (layer, part) row of every context token, a different one each step, so a
// request's decode steps together cover the rows. A mismatch fails the forward
// pass loudly.
//
// Time is virtual: a forward pass costs its prefill tokens at
// `prefill_tokens_per_s` (or one decode step), and a restore costs its bytes
// over PCIe plus the codec; the two overlap layer by layer.
#pragma once

#include <memory>

#include "engine/model_runner.h"
#include "memory/device_kv_pool.h"
#include "memory/host_kv_pool.h"

namespace hiq {

// Defaults from docs of the H200 (../shared/ANCHORS.md): Qwen3-8B prefill of
// 2,048 tokens in 66.6 ms, a decode step at batch 8 with 2K context in 76 ms,
// pinned host→device copies at 54 GB/s.
struct SimCostModel {
  double prefill_tokens_per_s = 30750;  // new tokens computed per second
  double decode_step_s = 0.076;         // one decode step of the whole batch
  double pcie_bytes_per_s = 54e9;       // L2 → L1 wire speed, encoded bytes
  double codec_bytes_per_s = 380e9;     // GPU decode speed, BF16 bytes produced
};

struct SimRunnerStats {
  uint64_t forward_calls = 0;
  uint64_t computed_tokens = 0;   // KV rows written by the "model"
  uint64_t verified_tokens = 0;   // cached tokens whose KV was checked on read (prefill: every row)
  uint64_t verified_rows = 0;     // rows compared, prefill and decode
  uint64_t restored_tokens_read = 0;
  double compute_seconds = 0, restore_seconds = 0;
};

class SimRunner final : public ModelRunner {
 public:
  // `l2` may be null (no host tier): then no slot can hold restored KV.
  SimRunner(DeviceKvPool& l1, const HostKvPool* l2, TransferEngine* engine, SimCostModel cost = {},
            int vocab_size = 151936);

  Result<std::vector<TokenId>> forward(std::span<const ForwardItem> batch) override;
  double now() const override { return clock_; }
  void advance_to(double t) override { clock_ = std::max(clock_, t); }
  const SimRunnerStats& stats() const { return stats_; }

  // The prefix hash the synthetic KV of tokens[p] derives from.
  static uint64_t prefix_hash(std::span<const TokenId> tokens, size_t p);

 private:
  static constexpr int kPatterns = 64;  // rows per (layer, part) pool
  size_t pattern(uint64_t hash, int row_index) const;
  const uint16_t* exact(int row_index, size_t pattern) const;
  const uint16_t* restored(int row_index, size_t pattern) const;
  // Compares the rows [first_row, last_row) of (layer, part) index space.
  Status verify(uint64_t hash, SlotId slot, int first_row, int last_row, size_t position);

  DeviceKvPool& l1_;
  const HostKvPool* l2_;
  TransferEngine* engine_;
  SimCostModel cost_;
  int vocab_size_;
  double clock_ = 0;
  SimRunnerStats stats_;
  int rows_per_token_;                 // layers × parts; row r is (layer r / parts, part r % parts)
  std::vector<std::vector<uint16_t>> exact_;     // per row index: kPatterns rows back to back
  std::vector<std::vector<uint16_t>> restored_;  // the same, through the L2 codec (empty without L2)
  uint64_t decode_steps_ = 0;
};

}  // namespace hiq
