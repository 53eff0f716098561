// transfer/transfer_bench.h — `hiq bench transfer`: what the CUDA transfer
// engine moves, against the copy engines measured in the same run.
//
// For each codec and batch (tokens of every layer, K and V):
// - restore (load) and backup through the engine: fused codec kernels reading
//   or writing pinned L2 directly, on at most `gpu_sms` multiprocessors; also a
//   restore from scattered L2 slots (a shuffled slot list), as after churn, and
//   the restore kernel over all layers in one launch, which prices the
//   engine's per-layer launches and events;
// - the references: plain cudaMemcpyAsync H2D and D2H of the same wire bytes
//   between pinned L2 and device memory;
// - the staged alternative design: the codec kernel on device memory plus
//   cudaMemcpyAsync per layer, pipelined on two streams (contiguous L2 slots,
//   its best case);
// - the codec kernels alone (device memory only, every multiprocessor) next to
//   a device-to-device copy of the BF16 bytes.
// Times are medians of repeated runs, host clock around submit-and-wait for
// every measurement and its reference alike.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "core/status.h"
#include "kv/geometry.h"

namespace hiq {

struct TransferBenchOptions {
  KvGeometry geometry;                      // the model's KV geometry (Qwen3-8B by default in the CLI)
  std::vector<CodecKind> codecs;            // codecs to measure
  std::vector<size_t> batches;              // tokens per operation
  size_t record_align = kDefaultRecordAlign;
  int gpu_sms = 16;                         // the engine's transfer-kernel blocks
  double seconds_per_measurement = 0.25;    // repeat each measurement about this long (at least 3 runs)
  bool staged = true;                       // also measure the staged design
};

struct TransferBenchRow {
  CodecKind codec = CodecKind::kBf16;
  size_t tokens = 0;
  size_t wire_bytes = 0;  // encoded bytes of the batch (what crosses PCIe)
  size_t bf16_bytes = 0;  // the same KV in BF16
  double restore_s = 0, restore_scattered_s = 0, backup_s = 0;  // through the engine
  double restore_one_launch_s = 0;  // the engine's restore kernel over all layers in one launch, no events
  double memcpy_h2d_s = 0, memcpy_d2h_s = 0;                    // references, same wire bytes
  double staged_restore_s = 0, staged_backup_s = 0;             // alternative design (0: not measured)
  double encode_kernel_s = 0, decode_kernel_s = 0;              // codec kernels alone, device memory
  double d2d_copy_s = 0;                                        // device-to-device copy of bf16_bytes
};

struct TransferBenchReport {
  std::string gpu;
  int multiprocessors = 0;
  int backup_blocks = 0, load_blocks = 0, load_streams = 0, threads_per_block = 0;  // the engine's kernels
  std::vector<TransferBenchRow> rows;
};

// Needs a CUDA GPU (kUnavailable otherwise) and host memory for the largest
// batch in BF16 (pinned) plus device memory for about three times that.
// `progress(done, total)` is called after each (codec, batch); may be null.
Result<TransferBenchReport> run_transfer_bench(const TransferBenchOptions& options,
                                               const std::function<void(size_t, size_t)>& progress = nullptr);

}  // namespace hiq
