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
// Checks: every cached row attention reads is checked. A prefill compares
// every row of every cached token it reads with the expected row, or — for KV
// restored from L2 — with the codec's exact round trip of it. A decode step
// reads its whole context again, every step: 72 rows of 2 KiB per token of
// Qwen3-8B, over a terabyte in Experiment B, which a full comparison would
// take minutes to read on a laptop. So a decode step checks every row of every
// context token by its first kSampleElements values, which it reads straight
// from the plane of a host-memory pool (one cache line per row, not 2 KiB):
// of 64 random rows any other differs there, so a row read from the wrong
// slot, overwritten by another token or layer, zeroed or left stale is caught
// on the step that reads it; damage past the first values of a row is caught
// only by a prefill, or by SimRunnerOptions::verify_every_decode_row, which
// compares every byte (as a pool in GPU memory always does). A mismatch fails
// the forward pass loudly, naming the token, slot, layer and part.
//
// L1 is reached through DeviceKvPool::read_rows/write_rows — the only way
// into a pool in GPU memory — except for the decode samples of a pool in host
// memory, read from its planes. A read_rows call costs a device
// synchronisation on a GPU pool, so rows move in batches: per (layer, part),
// one call for a chunk of tokens (kChunkBytes of rows), never one per row.
//
// Time is virtual: a forward pass costs its prefill tokens at
// `prefill_tokens_per_s` (or one decode step), and a restore costs its bytes
// over PCIe plus the codec; the two overlap layer by layer.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/model_runner.h"
#include "memory/device_kv_pool.h"
#include "memory/host_kv_pool.h"

namespace hiq {

// Defaults: Qwen3-8B (BF16) in this engine on an H200, as `hiq bench serve`
// measured it on the reference workload (docs/results.md, capacity sweep: the
// scheduler's prefill and decode seconds): prefills of 1–3 prompts of 2,112
// new tokens at ~38,000 tokens/s, a decode step of 8 requests with ~2K context
// in 7.05 ms; pinned host→device copies at 54 GB/s. The codec speed is the
// int8 decode kernel alone at 2,048 tokens of Qwen3-8B, `hiq bench transfer`
// on the H200 (docs/benchmarks.md, "Codec kernels alone": 2,645 GB/s of BF16
// rows read plus records written, i.e. 301,989,888 BF16 bytes in the
// decode_kernel_s of docs/data/bench-transfer-h200.json: 1,754 GB/s; bf16
// 1,934, fp8 1,852, int4 1,868, int4h 1,141). One figure serves every codec,
// and the engine's restore fuses the copy and the decode in one kernel, so
// adding the two is itself a model: it gives int8 restores of 2K tokens 100
// GB/s of BF16, where the engine measured 94.4 (same file and table,
// "Restore and backup through the engine"). Until 2026-12 this was 380 GB/s,
// a figure no measurement gave; docs/simulation.md's tables were made with it.
//
// By default a step costs the same whatever its batch: a prefill its new
// tokens at one rate, a decode step one fixed time. batch_dependent() adds
// what a step's batch costs on the H200 beyond that, and keeps the
// reference point above where it was (see there).
struct SimCostModel {
  double prefill_tokens_per_s = 38000;  // new tokens computed per second
  double decode_step_s = 0.00705;       // one decode step of the whole batch (its fixed part, below)
  double pcie_bytes_per_s = 54e9;       // L2 → L1 wire speed, encoded bytes
  double codec_bytes_per_s = 1754e9;    // GPU decode speed, BF16 bytes produced (int8, measured: above)
  // Per (new token, context token it attends to) pair of a prefill: causal
  // attention, which grows with the context where the products do not.
  double prefill_pair_s = 0;
  // Per context token a decode step reads (its KV), summed over the batch.
  double decode_context_token_s = 0;

  static SimCostModel batch_dependent();
};

struct SimRunnerOptions {
  SimCostModel cost;
  int vocab_size = 151936;  // next tokens are drawn below this
  // A decode step compares every byte of every row of its context, not the
  // first kSampleElements values of each row: for Qwen3-8B, 2 KiB read per
  // row instead of one cache line. Always so for a pool not in host memory.
  bool verify_every_decode_row = false;
};

struct SimRunnerStats {
  uint64_t forward_calls = 0;
  uint64_t computed_tokens = 0;   // KV rows written by the "model"
  uint64_t verified_tokens = 0;   // cached tokens whose KV was checked on read (prefill: every row)
  uint64_t verified_rows = 0;     // rows checked, prefill and decode (in full or by their sample)
  uint64_t sampled_rows = 0;      // of which checked by their first kSampleElements values (decode)
  uint64_t restored_tokens_read = 0;
  double compute_seconds = 0, restore_seconds = 0;
  double transfer_wait_seconds = 0;  // charged by waited_for_transfers
};

class SimRunner final : public ModelRunner {
 public:
  // `l2` may be null (no host tier): then no slot can hold restored KV.
  SimRunner(DeviceKvPool& l1, const HostKvPool* l2, TransferEngine* engine, SimRunnerOptions options = {});

  Result<std::vector<ForwardResult>> forward(std::span<const ForwardItem> batch) override;
  double now() const override { return clock_; }
  void advance_to(double t) override { clock_ = std::max(clock_, t); }
  // Charges the transfers' whole time, as if they had only just been issued
  // (an upper bound): the encoded bytes over PCIe plus the codec.
  void waited_for_transfers(size_t tokens) override;
  const SimRunnerStats& stats() const { return stats_; }

  // The prefix hash the synthetic KV of tokens[p] derives from.
  static uint64_t prefix_hash(std::span<const TokenId> tokens, size_t p);

 private:
  static constexpr int kPatterns = 64;  // rows per (layer, part) pool
  // A transfer of `tokens` between the tiers: its encoded bytes over PCIe plus
  // the codec's BF16 bytes (restores and backups alike).
  double transfer_seconds(size_t tokens) const;
  // Rows moved per read_rows/write_rows call, at most: large enough to make a
  // device call's synchronisation cheap per row, small enough that a host
  // pool's copy is still in the CPU's caches when it is compared (256 KiB to
  // 4 MiB ran equally fast in full-size `hiq sim`).
  static constexpr size_t kChunkBytes = size_t{1} << 20;
  // Values of a row a decode step compares: 16 bytes, one or two cache lines
  // read of a row of 2 KiB (Qwen3-8B).
  static constexpr size_t kSampleElements = 8;
  size_t pattern(uint64_t hash, int row_index) const;
  const uint16_t* exact(int row_index, size_t pattern) const;
  // Pattern `pattern` of a row as restored_'s variant `variant` has it.
  const uint16_t* restored(int row_index, size_t pattern, int variant) const;
  bool restored_matches(const uint16_t* actual, int row_index, size_t pattern, size_t elements) const;
  // Checks the rows [first_row, last_row) of row index space of the tokens in
  // `slots` (token i has prefix hash hashes[i]); counts a token as verified
  // when `count_tokens`. The error names the first wrong row in token order.
  Status verify(std::span<const SlotId> slots, std::span<const uint64_t> hashes, int first_row, int last_row,
                bool count_tokens);
  // A decode step's check of its context (see the header comment); the error
  // names the token by its position in `slots`.
  Status verify_decode(std::span<const SlotId> slots, std::span<const uint64_t> hashes);
  // Every row's first kSampleElements values, read from the planes of a
  // host-memory pool; token i is named as positions[i].
  Status verify_samples(std::span<const SlotId> slots, std::span<const uint64_t> hashes,
                        std::span<const size_t> positions);
  // Writes every row of the tokens in `slots` (prefix hashes `hashes`).
  Status write(std::span<const SlotId> slots, std::span<const uint64_t> hashes);

  DeviceKvPool& l1_;
  const HostKvPool* l2_;
  TransferEngine* engine_;
  SimRunnerOptions options_;
  double clock_ = 0;
  SimRunnerStats stats_;
  int rows_per_token_;                 // layers × parts; row r is (layer r / parts, part r % parts)
  std::vector<std::vector<uint16_t>> exact_;     // per row index: kPatterns rows back to back
  // The same through L2, per variant then row (empty without L2): variant k
  // < rungs is the chain down to rung k; a ladder adds the last rung's
  // round trip of the exact rows.
  std::vector<std::vector<uint16_t>> restored_;
  int variants_ = 0;  // variants of restored_
  size_t chunk_tokens_;                // tokens per read_rows/write_rows call
  std::vector<uint64_t> hashes_;       // scratch: prefix hashes of one item's tokens
  std::vector<uint16_t> rows_;         // scratch: chunk_tokens_ rows of one (layer, part)
  // Per slot: the forward call whose decode check last sampled it, and the
  // prefix hash it was checked for (a shared prefix is checked once a step).
  std::vector<uint64_t> checked_call_, checked_hash_;
  // The first kSampleElements values of pattern p of row index r, zero-padded:
  // [r * kPatterns + p], then (with L2) the restored ones at
  // [(rows_per_token_ + r) * kPatterns + p].
  using RowSample = std::array<uint64_t, 2>;
  static_assert(sizeof(RowSample) == kSampleElements * sizeof(uint16_t));
  std::vector<RowSample> samples_;
  std::vector<SlotId> sample_slots_;   // scratch: the slots a decode item still has to check
  std::vector<uint64_t> sample_hashes_;
  std::vector<size_t> sample_positions_;
};

}  // namespace hiq
