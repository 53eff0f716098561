// model/model_bench.h — `hiq bench model`: the CUDA forward pass on a model
// directory, with the references measured in the same run.
//
// - Prefill: one fresh prompt of N tokens (tokens/s).
// - Decode: one step for a batch of B sequences at C tokens of context, next
//   to its memory-bound floor: the weights it must read (all but the
//   embedding, which is only gathered) plus the batch's KV, over the device
//   bandwidth measured by a device-to-device copy in the same run. Timed
//   kernel by kernel, then (unless graphs are off) through the CUDA graph of
//   its bucket, from the same context; the graph's time is the headline.
// - Restore: a prompt whose first P tokens are restored from L2 through a
//   codec while the rest is computed (the forward pass waits for each layer
//   of the restore on the device), against recomputing the whole prompt: its
//   time, and how far its next-token logits are from the recomputed ones.
// Every figure is the median of repeated runs of the whole forward call (host
// preparation, upload, kernels, results back).
//
// Prefill and decode rows also carry their components: the device time of a
// profiled pass by stage (ForwardProfile; each component the median of a few
// passes, which run kernel by kernel), with the achieved FLOP/s of the
// projections and of attention.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "core/status.h"
#include "model/cpu_forward.h"
#include "model/cuda_model.h"
#include "model/model_config.h"

namespace hiq {

struct ModelBenchOptions {
  std::vector<int> prefill_tokens = {512, 2048, 8192};
  std::vector<int> decode_batches = {1, 8, 32};
  int decode_context = 2048;
  std::vector<CodecKind> restore_codecs = {CodecKind::kBf16, CodecKind::kInt8, CodecKind::kFp8, CodecKind::kInt4,
                                           CodecKind::kInt4H};
  int restore_prompt = 2048;   // tokens of the restore rows' prompt
  int restore_prefix = 1920;   // of which restored from L2
  double seconds_per_measurement = 1.0;
  // One decode step of each batch (through its graph, with graphs on) runs
  // between cudaProfilerStart and cudaProfilerStop, after its measurements:
  // `ncu --profile-from-start off` then times those kernels alone
  // (scripts/decode-breakdown).
  bool profiler_range = false;
  CudaModelOptions cuda;  // cuda_graphs false: decode is timed kernel by kernel only
};

struct ModelBenchReport {
  std::string gpu;
  size_t weight_bytes = 0;           // on the device
  size_t weight_bytes_per_step = 0;  // read by every step (all but the embedding)
  double device_copy_bytes_per_s = 0;  // D2D copy, bytes read + written
  // One pass by component, and the work of its projections and attention.
  struct Components {
    ForwardProfile seconds;
    double gemm_flops = 0;       // layer_gemm_flops
    double attention_flops = 0;  // attention_flops, summed over the batch
  };
  struct Prefill {
    int tokens = 0;
    double seconds = 0;
    Components components;
  };
  struct Decode {
    int batch = 0, context = 0;
    double step_seconds = 0;        // the graph's with graphs on, else the eager one
    double eager_step_seconds = 0;  // every kernel launched
    double graph_step_seconds = 0;  // one graph launch; 0 with graphs off
    size_t kv_bytes = 0;        // KV the step reads
    double floor_seconds = 0;   // (weights + KV) / device bandwidth
    Components components;
  };
  struct Restore {
    CodecKind codec = CodecKind::kBf16;
    int prompt = 0, prefix = 0;
    double restored_seconds = 0;    // restore of the prefix + forward of the rest, overlapped
    double recompute_seconds = 0;   // forward of the whole prompt
    double logits_relative_error = 0;  // ‖restored − recomputed‖ / ‖recomputed‖, next-token logits
    bool same_next_token = false;
  };
  std::vector<Prefill> prefill;
  std::vector<Decode> decode;
  bool cuda_graphs = false;
  CudaGraphStats graphs;  // over the whole run
  std::vector<Restore> restore;
};

// Multiply-adds count two. The layers' projections (QKV, O, gate|up, down) of
// `tokens` tokens, all layers (the LM head is not in it).
double layer_gemm_flops(const ModelShape& shape, int64_t tokens);
// Causal attention of one sequence: `q_len` new tokens at the end of a
// context of `kv_len` (query i sees kv_len − q_len + i + 1 tokens), 4 ·
// head_dim FLOPs per query head and visible token (Q·Kᵀ and P·V), all layers.
double attention_flops(const ModelShape& shape, int64_t q_len, int64_t kv_len);

// The report as `hiq bench model --json` prints it: the fields above (seconds
// as `..._s` in "components"), with tokens/s and the components' TFLOP/s.
std::string to_json(const ModelBenchReport& report);

// `hiq bench model --tp-size N`: the model split over N ranks
// (model/cuda_tp_model.h). Its prefill and decode rows (as above: the median
// of whole forward calls; decode steps kernel by kernel, as a rank runs
// them) are each set against the whole model on one GPU in the same run,
// where it fits there (its decode through CUDA graphs unless they are off:
// our best one-GPU step). The collective is also timed alone at each row's
// size — a layer sums two products of rows × hidden BF16 values — and
// reported as nccl-tests does: algorithm bandwidth (bytes / time) and bus
// bandwidth (2(N − 1)/N of it), next to a copy between the first two
// ranks' GPUs (one GPU: within it) measured in the same run.
struct TpBenchReport {
  int tp_size = 0;
  TpCollective collective = TpCollective::kNccl;
  std::vector<int> devices;       // rank r's GPU
  std::vector<std::string> gpus;  // its name
  size_t weight_bytes = 0;        // every rank's together
  double peer_copy_bytes_per_s = 0;  // bytes copied per second, rank 0's GPU to rank 1's
  struct Row {
    bool decode = false;
    int tokens = 0;   // prefill: the prompt; decode: the batch
    int context = 0;  // decode: each sequence's context
    double seconds = 0;             // a pass (prefill) or a step (decode), split over the ranks
    size_t all_reduce_bytes = 0;    // one sum's: rows (a decode batch's bucket) × hidden × 2
    double all_reduce_seconds = 0;  // the collective alone at that size (median)
    int all_reduces = 0;            // per pass: two a layer
    double one_gpu_seconds = 0;     // the whole model on one GPU; 0 when it did not fit
  };
  std::vector<Row> rows;
  std::string one_gpu_note;  // why there is no one-GPU reference, when there is none
  // Restores through the ranks' transfer engines (make_cuda_tp_transfer_engine):
  // `tokens` of a prefilled prompt backed up to one host pool of every rank's
  // records, then loaded back into other L1 slots, each rank its own part at
  // once; against a pinned host-to-device copy of one rank's bytes on rank
  // 0's GPU, alone, in the same run.
  struct Restore {
    CodecKind codec = CodecKind::kBf16;
    int tokens = 0;
    double seconds = 0;       // submission to every rank's last layer in L1 (median)
    size_t bytes = 0;         // records read from L2, every rank's
    double copy_seconds = 0;  // the pinned copy of bytes / tp_size
  };
  std::vector<Restore> restore;
};

std::string to_json(const TpBenchReport& report);

// Needs tp_size usable GPUs (or one, with the peer collective and every
// rank placed on it). The restore rows time the transfers alone (their
// codecs and restore_prefix from `options`), not a forward pass over them.
Result<TpBenchReport> run_tp_model_bench(const ModelConfig& config, const ModelShape& shape,
                                         const CpuModelWeights& weights, int tp_size, const CudaTpOptions& tp,
                                         const ModelBenchOptions& options,
                                         const std::function<void(size_t, size_t)>& progress = nullptr);

// Needs a CUDA GPU (kUnavailable otherwise). `progress(done, total)` after each
// measurement; may be null.
Result<ModelBenchReport> run_model_bench(const ModelConfig& config, const ModelShape& shape,
                                         const CpuModelWeights& weights, const ModelBenchOptions& options,
                                         const std::function<void(size_t, size_t)>& progress = nullptr);

}  // namespace hiq
