// CudaModel: weights on the GPU, one stream, cuBLASLt for the matrix products
// (BF16 in, FP32 accumulate; gemm.h) and our kernels for the rest.
//
// One pass over a batch, T new tokens in all:
//   embed → for each layer: [add +] RMSNorm → QKV (one fused GEMM) → bias,
//   q/k-norm, RoPE, K/V into L1 → wait for the layer's restore → attention
//   over L1 → O proj → add + RMSNorm → gate|up (one fused GEMM) → SiLU·up →
//   down → … → add + final norm → LM head (FP32 logits) → argmax. The last
//   layer gathers the rows whose logits are wanted after its attention and
//   computes the rest on those alone (a prompt's last row, say). A pass of
//   ≤ 8 rows applies SiLU·up in the gate|up product itself (skinny_gemm.h).
// The per-pass inputs (token ids, positions, slots, sequence table) go up in
// one copy from a pinned staging buffer; the pass ends with one copy of the
// results back and a stream synchronisation. A profiled pass (ForwardProfile)
// also records an event at each boundary between stages of another kind.
// A decode batch runs at its bucket's shape and, after the bucket's first
// step, as one launch of the bucket's CUDA graph (decode_graphs.h). With
// CudaModelOptions::fused_decode, a pass of ≤ 8 rows also folds the norms
// and the residual adds into its products: QKV(norm(x)) → … → x += O proj →
// act = gate|up(norm(x)) gated → x += down.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "codec/numeric.h"
#include "cuda/buffers.h"
#include "cuda/check.cuh"
#include "model/cuda/attention.h"
#include "model/cuda/decode_graphs.h"
#include "model/cuda/gemm.h"
#include "model/cuda/gemm_sm90.h"
#include "model/cuda/model_kernels.h"
#include "model/cuda/stage_marks.h"
#include "model/cuda_model.h"

namespace hiq {
namespace {

using cuda::bf16;

// Device memory that grows to the largest size asked for (contents are not
// kept); growing to `wanted` allocates max(wanted, allocate).
struct Scratch {
  cuda::DeviceMemory memory;
  size_t bytes = 0;
  Status reserve(size_t wanted, const char* what, size_t allocate = 0) {
    if (wanted <= bytes) return Status::ok();
    memory.reset();
    bytes = 0;
    allocate = std::max(wanted, allocate);
    HIQ_ASSIGN_OR_RETURN(memory, cuda::device_alloc(allocate, what));
    bytes = allocate;
    return Status::ok();
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(memory.get());
  }
};

// Host rows of a weight in BF16: the checkpoint's own bytes when it is BF16,
// else each element rounded from F16/F32 (cpu::read_row widens it first).
Status upload_matrix(const cpu::MatrixView& m, bf16* dst) {
  const size_t elements = static_cast<size_t>(m.rows) * static_cast<size_t>(m.cols);
  if (m.type == cpu::WeightType::kBf16)
    return cuda::cuda_status(cudaMemcpy(dst, m.data, elements * sizeof(bf16), cudaMemcpyHostToDevice), "weight upload");
  constexpr int64_t kRowsPerCopy = 256;
  std::vector<float> row(static_cast<size_t>(m.cols));
  std::vector<uint16_t> chunk;
  for (int64_t r0 = 0; r0 < m.rows; r0 += kRowsPerCopy) {
    const int64_t rows = std::min(kRowsPerCopy, m.rows - r0);
    chunk.resize(static_cast<size_t>(rows * m.cols));
    for (int64_t r = 0; r < rows; ++r) {
      cpu::read_row(m, r0 + r, row.data());
      for (int64_t c = 0; c < m.cols; ++c) chunk[static_cast<size_t>(r * m.cols + c)] = numeric::float_to_bf16(row[static_cast<size_t>(c)]);
    }
    HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst + r0 * m.cols, chunk.data(), chunk.size() * sizeof(uint16_t),
                                        cudaMemcpyHostToDevice));
  }
  return Status::ok();
}

cpu::MatrixView as_matrix(const cpu::VectorView& v) { return {v.type, v.data, 1, v.size}; }

// Several weights stacked row-wise into one device matrix (QKV, gate|up), or
// one. A part whose data is null (an absent bias) becomes zeros.
Result<cuda::DeviceMemory> upload_stacked(std::initializer_list<cpu::MatrixView> parts, const char* what,
                                          size_t& uploaded_bytes) {
  size_t elements = 0;
  for (const auto& p : parts) elements += static_cast<size_t>(p.rows * p.cols);
  uploaded_bytes += elements * sizeof(bf16);
  HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory memory, cuda::device_alloc(elements * sizeof(bf16), what));
  auto* dst = static_cast<bf16*>(memory.get());
  for (const auto& p : parts) {
    if (p.data != nullptr) HIQ_RETURN_IF_ERROR(upload_matrix(p, dst));
    else HIQ_CUDA_RETURN_IF_ERROR(cudaMemset(dst, 0, static_cast<size_t>(p.rows * p.cols) * sizeof(bf16)));
    dst += p.rows * p.cols;
  }
  return Result<cuda::DeviceMemory>(std::move(memory));
}

struct DeviceLayer {
  cuda::DeviceMemory input_norm, qkv, qkv_bias, q_norm, k_norm, o_proj, o_bias, post_norm, gate_up, down;
};

// A pass as its kernels see it. A decode batch of B ≤ cuda_graph_max_batch
// sequences runs at its bucket (model/cuda_model_options.h): `rows` rows and
// sequence-table entries, those past B padding, and attention sized for the
// context bucket; everything here is then a function of the bucket.
struct PassShape {
  int rows = 0;        // new tokens, padding included: the rows of every activation
  int sequences = 0;   // sequence-table entries, padding included
  int logit_rows = 0;  // rows the LM head computes
  int max_q_len = 0;
  int max_kv_len = 0;  // what attention's context splits are sized for
  int context = 0;     // Σ kv_len: the context slot table's entries
  bool decode = false;  // a decode batch at its bucket: its kernels can be a graph's
  cuda::DecodeGraphs::Key key() const { return {rows, max_kv_len}; }
};

// The per-pass inputs, laid out in one buffer (offsets in bytes, 16-aligned).
// The context slot table comes last: the steps of a decode bucket differ in
// its length only, so every array keeps its address from step to step.
struct PassLayout {
  size_t tokens = 0, positions = 0, slots = 0, sequences = 0, logit_rows = 0, context_slots = 0, bytes = 0;
};

size_t align16(size_t n) { return (n + 15) / 16 * 16; }

// Whether split decode contexts are merged by the attention kernel's last
// block (on AttentionArgs::split_counters) rather than by a kernel of their
// own. Off: it passes memcheck and racecheck, but a decode step measured
// 1.012–1.025× slower with it on an H100 (docs/benchmarks.md, "Decode on
// the H100"); without counters the separate kernel runs.
constexpr bool kInKernelSplitCombine = false;

// The fewest rows a product takes the Hopper kernel's epilogues at
// (CudaModelOptions::fused_prefill): its tiles are 128 rows, so below this
// they would be mostly padding, where cuBLAS picks narrower tiles.
constexpr int kEpilogueRows = 256;

PassLayout layout_of(const PassShape& p, size_t context) {
  PassLayout l;
  l.positions = align16(l.tokens + static_cast<size_t>(p.rows) * sizeof(int32_t));
  l.slots = align16(l.positions + static_cast<size_t>(p.rows) * sizeof(int32_t));
  l.sequences = align16(l.slots + static_cast<size_t>(p.rows) * sizeof(uint32_t));
  l.logit_rows = align16(l.sequences + static_cast<size_t>(p.sequences) * sizeof(cuda::AttentionSequence));
  l.context_slots = align16(l.logit_rows + static_cast<size_t>(p.logit_rows) * sizeof(int32_t));
  l.bytes = align16(l.context_slots + context * sizeof(uint32_t));
  return l;
}

class CudaModelImpl final : public CudaModel {
 public:
  static Result<std::unique_ptr<CudaModel>> create(const ModelShape& shape, const CpuModelWeights& weights,
                                                   const CudaModelOptions& options, RowParallelReduce reduce);

  Result<ModelOutput> forward(DeviceKvPool& l1, std::span<const ModelSequence> batch, LogitsWanted logits,
                              const BeforeLayerAttention& before_attention, ForwardProfile* profile) override;
  void* stream() const override { return stream_.get(); }
  const ModelShape& shape() const override { return shape_; }
  size_t weight_bytes() const override { return weight_bytes_; }
  size_t workspace_bytes() const override;
  void set_cuda_graphs(bool enabled) override {
    graphs_on_ = enabled && !reduce_;
    if (!enabled) graphs_.drop();
  }
  CudaGraphStats graph_stats() const override { return graphs_.stats(); }

 private:
  Status upload(const CpuModelWeights& w);
  // y[m][n] = x[m][k] · w[n][k]ᵀ, y in BF16 or FP32.
  Status gemm(const bf16* x, int m, const bf16* w, int n, int k, void* y, cudaDataType_t y_type) {
    return gemms_.run(x, m, w, n, k, y, y_type);
  }
  Status mark(cuda::Stage stage) { return marks_.mark(stage, stream_.get()); }
  cuda::AttentionArgs attention_args(const PassShape& p) const;  // without its pointers
  // Whether a pass of p.rows rows runs its layers' norms, residual adds and
  // SiLU gate inside its matrix products (skinny_gemm.h): a decode-sized pass
  // whose every product the skinny kernel takes, of a model with no output
  // bias (which would sit between o_proj and the residual add).
  bool fused_layers(const PassShape& p) const;
  // The steps of a pass on the stream: prepare sizes the scratch for it (and
  // binds the decode graphs to the scratch and the pool) and uploads the
  // inputs; enqueue launches the kernels, embedding to argmax — what a decode
  // graph holds; download brings the real rows' results back to staging.
  Status prepare(DeviceKvPool& l1, const PassShape& p, const PassLayout& layout, bool graph);
  Status enqueue(DeviceKvPool& l1, const PassShape& p, const PassLayout& layout,
                 const BeforeLayerAttention& before_attention);
  Status download(LogitsWanted logits, int logit_rows);
  // Grows the attention's split counters to `count`, zeroed; on failure
  // leaves none (attention then merges its splits in a kernel of its own).
  void reserve_split_counters(size_t count);
  // The split counters for a pass's attention: nullptr unless there are enough.
  unsigned int* split_counters(const cuda::AttentionArgs& attention) const;
  // The scratch a decode graph may read (attention_staging_ is prefill's alone).
  std::array<const Scratch*, 13> scratch() const {
    return {&x_,    &normed_, &qkv_,  &attn_,         &delta_,          &gate_up_, &act_,
            &rows_, &logits_, &next_, &attention_ws_, &split_counters_, &inputs_};
  }
  // Every address a decode graph holds that can move: the scratch, the pool's planes.
  std::vector<const void*> graph_addresses(DeviceKvPool& l1) const;

  // Sums a row-parallel product over the ranks in place (none: one rank);
  // a profile charges it to kOther.
  Status reduce(bf16* partial, int rows) {
    if (!reduce_) return Status::ok();
    HIQ_RETURN_IF_ERROR(mark(cuda::Stage::kOther));
    return reduce_(partial, static_cast<size_t>(rows) * static_cast<size_t>(shape_.hidden_size), stream_.get());
  }

  ModelShape shape_;
  CudaModelOptions options_;
  RowParallelReduce reduce_;
  int multiprocessors_ = 0;
  cuda::Stream stream_;
  cuda::DeviceMemory cublas_workspace_;
  cuda::Gemms gemms_;
  cuda::DeviceMemory embed_, final_norm_, lm_head_, inv_freq_;
  std::vector<DeviceLayer> layers_;
  size_t weight_bytes_ = 0;
  // Scratch, sized for the largest pass so far.
  Scratch x_, normed_, qkv_, attn_, delta_, gate_up_, act_, rows_, logits_, next_, attention_ws_, attention_staging_,
      inputs_;
  // AttentionArgs::split_counters, one per (sequence, KV head) of the
  // largest split pass so far: zeroed when allocated, and every attention
  // launch leaves them zero, graph replays included.
  Scratch split_counters_;
  cuda::PinnedMemory staging_;  // host side of inputs_ and of the results
  size_t staging_bytes_ = 0;
  cuda::StageMarks marks_;
  cuda::DecodeGraphs graphs_;
  bool graphs_on_ = true;
};

Result<std::unique_ptr<CudaModel>> CudaModelImpl::create(const ModelShape& shape, const CpuModelWeights& weights,
                                                         const CudaModelOptions& options, RowParallelReduce reduce) {
  HIQ_RETURN_IF_ERROR(options.validate());
  HIQ_RETURN_IF_ERROR(check_weights(shape, weights));
  if (!cuda::attention_head_dim_supported(shape.head_dim))
    return invalid_argument("the CUDA backend has no attention kernel for head_dim " + std::to_string(shape.head_dim) +
                            " (16, 32, 64, 128 or 256)");
  HIQ_RETURN_IF_ERROR(cuda::require_gpu());
  auto model = std::unique_ptr<CudaModelImpl>(new CudaModelImpl());
  model->shape_ = shape;
  model->options_ = options;
  model->reduce_ = std::move(reduce);
  // A tensor-parallel rank meets the others on the host between kernels: no graph can hold that.
  model->graphs_on_ = options.cuda_graphs && !model->reduce_;
  int device = 0;
  HIQ_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  HIQ_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&model->multiprocessors_, cudaDevAttrMultiProcessorCount, device));
  HIQ_ASSIGN_OR_RETURN(model->stream_, cuda::make_stream());
  // cuBLAS(Lt) picks its fastest Hopper kernels only with a workspace of its own.
  constexpr size_t kCublasWorkspace = size_t{32} << 20;
  HIQ_ASSIGN_OR_RETURN(model->cublas_workspace_, cuda::device_alloc(kCublasWorkspace, "cuBLAS workspace"));
  HIQ_ASSIGN_OR_RETURN(model->gemms_,
                       cuda::Gemms::create(model->stream_.get(), model->cublas_workspace_.get(), kCublasWorkspace));
  HIQ_RETURN_IF_ERROR(model->upload(weights));
  return Result<std::unique_ptr<CudaModel>>(std::move(model));
}

Status CudaModelImpl::upload(const CpuModelWeights& w) {
  const ModelShape& s = shape_;
  const int64_t q_out = int64_t{s.num_heads} * s.head_dim, kv_out = int64_t{s.num_kv_heads} * s.head_dim;
  HIQ_ASSIGN_OR_RETURN(embed_, upload_stacked({w.embed_tokens}, "embedding", weight_bytes_));
  HIQ_ASSIGN_OR_RETURN(lm_head_, upload_stacked({w.lm_head}, "lm_head", weight_bytes_));
  HIQ_ASSIGN_OR_RETURN(final_norm_, upload_stacked({as_matrix(w.final_norm)}, "final norm", weight_bytes_));
  for (const LayerWeights& l : w.layers) {
    DeviceLayer d;
    const bool qkv_bias = l.q_bias.data != nullptr || l.k_bias.data != nullptr || l.v_bias.data != nullptr;
    HIQ_ASSIGN_OR_RETURN(d.input_norm, upload_stacked({as_matrix(l.input_norm)}, "input_layernorm", weight_bytes_));
    HIQ_ASSIGN_OR_RETURN(d.qkv, upload_stacked({l.q_proj, l.k_proj, l.v_proj}, "qkv_proj", weight_bytes_));
    if (qkv_bias) {
      const cpu::VectorView q{l.q_bias.type, l.q_bias.data, q_out}, k{l.k_bias.type, l.k_bias.data, kv_out},
          v{l.v_bias.type, l.v_bias.data, kv_out};
      HIQ_ASSIGN_OR_RETURN(d.qkv_bias, upload_stacked({as_matrix(q), as_matrix(k), as_matrix(v)}, "qkv bias", weight_bytes_));
    }
    if (l.q_norm.data != nullptr) {
      HIQ_ASSIGN_OR_RETURN(d.q_norm, upload_stacked({as_matrix(l.q_norm)}, "q_norm", weight_bytes_));
    }
    if (l.k_norm.data != nullptr) {
      HIQ_ASSIGN_OR_RETURN(d.k_norm, upload_stacked({as_matrix(l.k_norm)}, "k_norm", weight_bytes_));
    }
    HIQ_ASSIGN_OR_RETURN(d.o_proj, upload_stacked({l.o_proj}, "o_proj", weight_bytes_));
    if (l.o_bias.data != nullptr) {
      HIQ_ASSIGN_OR_RETURN(d.o_bias, upload_stacked({as_matrix(l.o_bias)}, "o_proj bias", weight_bytes_));
    }
    HIQ_ASSIGN_OR_RETURN(d.post_norm, upload_stacked({as_matrix(l.post_attention_norm)}, "post_attention_layernorm", weight_bytes_));
    HIQ_ASSIGN_OR_RETURN(d.gate_up, upload_stacked({l.gate_proj, l.up_proj}, "gate_up_proj", weight_bytes_));
    HIQ_ASSIGN_OR_RETURN(d.down, upload_stacked({l.down_proj}, "down_proj", weight_bytes_));
    layers_.push_back(std::move(d));
  }
  HIQ_ASSIGN_OR_RETURN(inv_freq_, cuda::device_alloc(s.rope.inv_freq.size() * sizeof(float), "rope table"));
  HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(inv_freq_.get(), s.rope.inv_freq.data(), s.rope.inv_freq.size() * sizeof(float),
                                      cudaMemcpyHostToDevice));
  return Status::ok();
}

size_t CudaModelImpl::workspace_bytes() const {
  size_t total = 0;
  for (const Scratch* s : scratch()) total += s->bytes;
  return total + attention_staging_.bytes;
}

Result<ModelOutput> CudaModelImpl::forward(DeviceKvPool& l1, std::span<const ModelSequence> batch,
                                           LogitsWanted logits, const BeforeLayerAttention& before_attention,
                                           ForwardProfile* profile) {
  if (batch.empty()) return ModelOutput{};
  if (l1.host_accessible()) return invalid_argument("forward: the CUDA model needs an L1 pool in GPU memory");
  size_t tokens = 0, context = 0;
  int max_q_len = 0, max_kv_len = 0;
  for (const ModelSequence& seq : batch) {
    HIQ_RETURN_IF_ERROR(check_sequence(shape_, l1, seq.tokens, seq.slots, seq.first_new));
    tokens += seq.tokens.size() - seq.first_new;
    context += seq.tokens.size();
    max_q_len = std::max(max_q_len, static_cast<int>(seq.tokens.size() - seq.first_new));
    max_kv_len = std::max(max_kv_len, static_cast<int>(seq.tokens.size()));
  }
  if (tokens > INT32_MAX / 2 || context > UINT32_MAX / 2) return out_of_range("forward: the batch is too large");
  const size_t logit_rows = logits == LogitsWanted::kAll ? tokens : batch.size();

  PassShape p;
  p.rows = static_cast<int>(tokens);
  p.sequences = static_cast<int>(batch.size());
  p.logit_rows = static_cast<int>(logit_rows);
  p.max_q_len = max_q_len;
  p.max_kv_len = max_kv_len;
  p.context = static_cast<int>(context);
  // Every sequence brings one token: a decode batch, at its bucket's shape.
  const int bucket = max_q_len == 1 ? decode_batch_bucket(p.sequences, options_.cuda_graph_max_batch) : 0;
  if (bucket > 0) {
    p.rows = p.sequences = p.logit_rows = bucket;
    p.max_kv_len = decode_context_bucket(max_kv_len);
    p.decode = true;
  }
  const PassLayout layout = layout_of(p, context);

  // The staging buffer carries the inputs up, then the results (of the real rows) back.
  const size_t result_bytes = align16(logit_rows * sizeof(int32_t)) +
                              (logits == LogitsWanted::kNone ? 0 : logit_rows * shape_.vocab_size * sizeof(float));
  const size_t staging = std::max(layout.bytes, align16(result_bytes));
  if (staging > staging_bytes_) {
    staging_.reset();
    staging_bytes_ = 0;
    HIQ_ASSIGN_OR_RETURN(staging_, cuda::pinned_alloc(staging, "forward staging"));
    staging_bytes_ = staging;
  }
  auto* host = static_cast<std::byte*>(staging_.get());
  auto* token_ids = reinterpret_cast<int32_t*>(host + layout.tokens);
  auto* positions = reinterpret_cast<int32_t*>(host + layout.positions);
  auto* slots = reinterpret_cast<uint32_t*>(host + layout.slots);
  auto* sequences = reinterpret_cast<cuda::AttentionSequence*>(host + layout.sequences);
  auto* rows = reinterpret_cast<int32_t*>(host + layout.logit_rows);
  auto* context_slots = reinterpret_cast<uint32_t*>(host + layout.context_slots);
  int32_t q_start = 0, slot_start = 0;
  size_t row = 0;
  for (size_t b = 0; b < batch.size(); ++b) {
    const ModelSequence& seq = batch[b];
    const auto n = static_cast<int32_t>(seq.tokens.size()), first = static_cast<int32_t>(seq.first_new);
    for (int32_t i = first; i < n; ++i) {
      token_ids[q_start + i - first] = seq.tokens[static_cast<size_t>(i)];
      positions[q_start + i - first] = i;
      slots[q_start + i - first] = seq.slots[static_cast<size_t>(i)];
      if (logits == LogitsWanted::kAll) rows[row++] = q_start + i - first;
    }
    if (logits != LogitsWanted::kAll) rows[row++] = q_start + n - first - 1;
    std::copy(seq.slots.begin(), seq.slots.end(), context_slots + slot_start);
    sequences[b] = {q_start, n - first, n, slot_start};
    q_start += n - first;
    slot_start += n;
  }
  // The padding of a decode batch: token 0 at position 0, storing no KV and
  // attending to the first context token of sequence 0, so that every value
  // it computes is finite; its rows stay its own through every kernel.
  for (int b = static_cast<int>(batch.size()); b < p.sequences; ++b) {
    token_ids[b] = 0;
    positions[b] = 0;
    slots[b] = cuda::kNoKvSlot;
    sequences[b] = {b, 1, 1, 0};
    rows[b] = b;
  }

  marks_.begin(profile != nullptr);
  // A restore's waits are on events of that restore, which a graph cannot
  // take from one step to the next: such a pass runs kernel by kernel (a
  // restored prompt computes at least its last token, so it is rarely a
  // decode batch anyway). A profiled pass records events between kernels.
  const bool graph = p.decode && graphs_on_ && !before_attention && profile == nullptr;
  auto state = cuda::DecodeGraphs::State::kFailed;
  Status status = prepare(l1, p, layout, graph);
  if (status.is_ok() && graph) state = graphs_.state(p.key());
  if (status.is_ok()) {
    status = state == cuda::DecodeGraphs::State::kCaptured ? graphs_.launch(p.key(), stream_.get())
                                                           : enqueue(l1, p, layout, before_attention);
  }
  if (status.is_ok()) status = download(logits, static_cast<int>(logit_rows));
  // Whatever happened, nothing may still be using the staging buffer or the
  // scratch space when we return.
  const Status synced = cuda::cuda_status(cudaStreamSynchronize(stream_.get()), "forward");
  HIQ_RETURN_IF_ERROR(status);
  HIQ_RETURN_IF_ERROR(synced);
  if (profile != nullptr) {
    HIQ_ASSIGN_OR_RETURN(*profile, marks_.read());
  }
  // The bucket's first step ran kernel by kernel (which also loads every
  // kernel it needs, so none loads during the capture); the next replay it.
  if (state == cuda::DecodeGraphs::State::kNew)
    graphs_.capture(p.key(), stream_.get(), [&] { return enqueue(l1, p, layout, nullptr); });

  ModelOutput out;
  const auto* next = reinterpret_cast<const int32_t*>(host);
  // The argmax ran over every logit row; each sequence's is its last.
  if (logits == LogitsWanted::kAll) {
    int32_t end = 0;
    for (const ModelSequence& seq : batch) {
      end += static_cast<int32_t>(seq.tokens.size() - seq.first_new);
      out.next_tokens.push_back(next[end - 1]);
    }
  } else {
    out.next_tokens.assign(next, next + batch.size());
  }
  if (logits != LogitsWanted::kNone) {
    const auto* values = reinterpret_cast<const float*>(host + align16(logit_rows * sizeof(int32_t)));
    out.logits.assign(values, values + logit_rows * static_cast<size_t>(shape_.vocab_size));
  }
  return out;
}

cuda::AttentionArgs CudaModelImpl::attention_args(const PassShape& p) const {
  cuda::AttentionArgs a;
  a.num_sequences = p.sequences;
  a.max_q_len = p.max_q_len;
  a.max_kv_len = p.max_kv_len;
  a.num_tokens = p.rows;
  a.heads = shape_.num_heads;
  a.kv_heads = shape_.num_kv_heads;
  a.head_dim = shape_.head_dim;
  a.scale = 1.f / std::sqrt(static_cast<float>(shape_.head_dim));
  a.context_entries = p.context;
  a.kernel = cuda::attention_kernel_for(a, multiprocessors_);
  // The staged Hopper kernel copies the whole context once per layer: worth it
  // when the new tokens (whose rows re-read the context) are a fair share of
  // it. It encodes its buffer's extent at each launch, which a decode graph
  // would freeze: a graph's step gathers by slot in the kernel.
  if (a.kernel == cuda::AttentionKernel::kSm90 && !p.decode && 4L * p.rows >= p.context)
    a.kernel = cuda::AttentionKernel::kSm90Staged;
  a.splits = cuda::attention_splits(a, multiprocessors_);
  return a;
}

bool CudaModelImpl::fused_layers(const PassShape& p) const {
  const ModelShape& s = shape_;
  if (!options_.fused_decode || reduce_ || !gemms_.fuses(p.rows) || layers_.empty()) return false;
  if (std::any_of(layers_.begin(), layers_.end(), [](const DeviceLayer& l) { return static_cast<bool>(l.o_bias); }))
    return false;
  const int q_out = s.num_heads * s.head_dim;
  cuda::SkinnyFusion norm;
  norm.norm_weight = static_cast<const bf16*>(layers_[0].input_norm.get());
  // k of every product a multiple of the kernel's chunk (the rest it checks at launch).
  return s.hidden_size % 32 == 0 && q_out % 32 == 0 && s.intermediate_size % 32 == 0 &&
         cuda::skinny_fusion_supports(p.rows, s.hidden_size, norm, CUDA_R_16BF);
}

std::vector<const void*> CudaModelImpl::graph_addresses(DeviceKvPool& l1) const {
  std::vector<const void*> addresses;
  for (const Scratch* s : scratch()) addresses.push_back(s->memory.get());
  for (int layer = 0; layer < shape_.num_layers; ++layer)
    for (KvPart part : {KvPart::kK, KvPart::kV}) addresses.push_back(l1.plane(layer, part));
  return addresses;
}

Status CudaModelImpl::prepare(DeviceKvPool& l1, const PassShape& p, const PassLayout& layout, bool graph) {
  const ModelShape& s = shape_;
  const int hidden = s.hidden_size, q_out = s.num_heads * s.head_dim, kv_out = s.num_kv_heads * s.head_dim;
  const int qkv_out = q_out + 2 * kv_out, inter = s.intermediate_size;
  const auto t = static_cast<size_t>(p.rows), logit_rows = static_cast<size_t>(p.logit_rows);
  // A decode batch's context grows a token a step: room for twice as much
  // keeps the buffer (and the graphs that read it) in place for a while.
  HIQ_RETURN_IF_ERROR(inputs_.reserve(layout.bytes, "forward inputs", p.decode ? 2 * layout.bytes : 0));
  HIQ_RETURN_IF_ERROR(x_.reserve(t * hidden * sizeof(bf16), "residual stream"));
  HIQ_RETURN_IF_ERROR(normed_.reserve(t * hidden * sizeof(bf16), "normalised activations"));
  HIQ_RETURN_IF_ERROR(qkv_.reserve(t * qkv_out * sizeof(bf16), "qkv"));
  HIQ_RETURN_IF_ERROR(attn_.reserve(t * q_out * sizeof(bf16), "attention output"));
  HIQ_RETURN_IF_ERROR(delta_.reserve(t * hidden * sizeof(bf16), "layer output"));
  HIQ_RETURN_IF_ERROR(gate_up_.reserve(t * 2 * inter * sizeof(bf16), "gate_up"));
  HIQ_RETURN_IF_ERROR(act_.reserve(t * inter * sizeof(bf16), "mlp activation"));
  HIQ_RETURN_IF_ERROR(rows_.reserve(logit_rows * hidden * sizeof(bf16), "lm_head input"));
  HIQ_RETURN_IF_ERROR(logits_.reserve(logit_rows * s.vocab_size * sizeof(float), "logits"));
  HIQ_RETURN_IF_ERROR(next_.reserve(logit_rows * sizeof(int32_t), "next tokens"));
  const cuda::AttentionArgs attention = attention_args(p);
  HIQ_RETURN_IF_ERROR(attention_ws_.reserve(
      cuda::attention_workspace_floats(attention.splits, p.rows, s.num_heads, s.head_dim) * sizeof(float),
      "attention workspace"));
  HIQ_RETURN_IF_ERROR(attention_staging_.reserve(cuda::attention_staging_bytes(attention), "attention staging"));
  if (kInKernelSplitCombine && attention.splits > 1 && cuda::attention_decode_form(attention))
    reserve_split_counters(static_cast<size_t>(p.sequences) * static_cast<size_t>(s.num_kv_heads));
  if (graph) graphs_.bind(graph_addresses(l1));

  HIQ_RETURN_IF_ERROR(mark(cuda::Stage::kOther));
  return cuda::cuda_status(
      cudaMemcpyAsync(inputs_.memory.get(), staging_.get(), layout.bytes, cudaMemcpyHostToDevice, stream_.get()),
      "forward inputs upload");
}

void CudaModelImpl::reserve_split_counters(size_t count) {
  const size_t bytes = count * sizeof(unsigned int);
  if (bytes <= split_counters_.bytes) return;
  // Zeroed on the stream, before any launch that counts on them. Without
  // them the results are the same, one launch a layer slower: no pass fails for them.
  if (split_counters_.reserve(bytes, "attention split counters").is_ok() &&
      cudaMemsetAsync(split_counters_.memory.get(), 0, bytes, stream_.get()) == cudaSuccess)
    return;
  (void)cudaGetLastError();
  split_counters_.memory.reset();
  split_counters_.bytes = 0;
}

unsigned int* CudaModelImpl::split_counters(const cuda::AttentionArgs& attention) const {
  const size_t count = static_cast<size_t>(attention.num_sequences) * static_cast<size_t>(attention.kv_heads);
  return count * sizeof(unsigned int) <= split_counters_.bytes ? split_counters_.as<unsigned int>() : nullptr;
}

Status CudaModelImpl::enqueue(DeviceKvPool& l1, const PassShape& p, const PassLayout& layout,
                              const BeforeLayerAttention& before_attention) {
  const ModelShape& s = shape_;
  const cudaStream_t stream = stream_.get();
  const int hidden = s.hidden_size, q_out = s.num_heads * s.head_dim, kv_out = s.num_kv_heads * s.head_dim;
  const int qkv_out = q_out + 2 * kv_out, inter = s.intermediate_size;
  const int tokens = p.rows, logit_rows = p.logit_rows;

  const auto* in = inputs_.as<std::byte>();
  const auto* token_ids = reinterpret_cast<const int32_t*>(in + layout.tokens);
  const auto* positions = reinterpret_cast<const int32_t*>(in + layout.positions);
  const auto* slots = reinterpret_cast<const uint32_t*>(in + layout.slots);
  const auto* rows = reinterpret_cast<const int32_t*>(in + layout.logit_rows);
  cuda::AttentionArgs attention = attention_args(p);
  attention.sequences = reinterpret_cast<const cuda::AttentionSequence*>(in + layout.sequences);
  attention.slots = reinterpret_cast<const uint32_t*>(in + layout.context_slots);
  attention.workspace = attention_ws_.as<float>();
  attention.split_counters = split_counters(attention);
  attention.staging = attention_staging_.memory.get();

  bf16* x = x_.as<bf16>();
  bf16* normed = normed_.as<bf16>();
  bf16* qkv = qkv_.as<bf16>();
  bf16* delta = delta_.as<bf16>();
  const bool fused = fused_layers(p);
  // A decode-sized pass takes SiLU·up into its gate|up product even unfused:
  // the skinny kernel's gating epilogue has no prologue to slow it, and the
  // step loses a kernel a layer (measured at Qwen3-8B's shapes on one GPU;
  // tensor-parallel ranks keep cuBLAS and the SiLU kernel until measured).
  const auto gate_in_product = [&](int m) { return !reduce_ && gemms_.fuses(m); };
  // The rows the layers compute: all of them, until the last layer's
  // attention in a pass that is not fused (fused passes are decode-sized).
  // Not on a tensor-parallel rank: the ranks other than 0 are asked for no
  // logits and do not know which rows rank 0 wants, and every rank's
  // all-reduces must have the same rows.
  int live = tokens;
  const bool wanted_rows_only = !reduce_;
  // With CudaModelOptions::fused_prefill, a prefill-sized product applies
  // the step after it (the residual add, the SiLU gate) before it stores,
  // on the Hopper kernel (gemm_sm90.h), where that takes the shape. Not on
  // a tensor-parallel rank, whose partial products are all-reduced before
  // any add.
  const bool epilogues = options_.fused_prefill && !reduce_ && !fused;
  const auto in_epilogue = [&](const bf16* in, int m, const cuda::DeviceMemory& w, int n, int k, const bf16* out,
                               cuda::Sm90Epilogue epilogue) {
    return epilogues && m >= kEpilogueRows && cuda::gemm_sm90_supports(in, m, w.get(), n, k, out, epilogue);
  };
  // What the next norm adds into the residual stream first: the last
  // product's output, unless that product added itself.
  const bf16* pending = nullptr;
  const auto normalized_by = [&](const cuda::DeviceMemory& norm) {
    cuda::SkinnyFusion f;
    f.norm_weight = static_cast<const bf16*>(norm.get());
    f.norm_eps = s.rms_norm_eps;
    return f;
  };
  HIQ_RETURN_IF_ERROR(mark(cuda::Stage::kNormElementwise));
  HIQ_RETURN_IF_ERROR(cuda::launch_gather_rows(static_cast<const bf16*>(embed_.get()), token_ids, tokens, hidden, x,
                                               stream));
  for (int layer = 0; layer < s.num_layers; ++layer) {
    const DeviceLayer& w = layers_[static_cast<size_t>(layer)];
    if (fused) {
      HIQ_RETURN_IF_ERROR(mark(cuda::Stage::kGemm));
      HIQ_RETURN_IF_ERROR(gemms_.run_fused(x, tokens, static_cast<const bf16*>(w.qkv.get()), qkv_out, hidden, qkv,
                                           normalized_by(w.input_norm)));
    } else {
      HIQ_RETURN_IF_ERROR(mark(cuda::Stage::kNormElementwise));
      HIQ_RETURN_IF_ERROR(cuda::launch_add_rms_norm(x, pending, static_cast<const bf16*>(w.input_norm.get()), tokens,
                                                    hidden, s.rms_norm_eps, normed, stream));
      HIQ_RETURN_IF_ERROR(mark(cuda::Stage::kGemm));
      HIQ_RETURN_IF_ERROR(
          gemm(normed, tokens, static_cast<const bf16*>(w.qkv.get()), qkv_out, hidden, qkv, CUDA_R_16BF));
    }

    auto* k_plane = reinterpret_cast<bf16*>(l1.plane(layer, KvPart::kK));
    auto* v_plane = reinterpret_cast<bf16*>(l1.plane(layer, KvPart::kV));
    cuda::QkvArgs qa;
    qa.qkv = qkv;
    qa.bias = static_cast<const bf16*>(w.qkv_bias.get());
    qa.q_norm = static_cast<const bf16*>(w.q_norm.get());
    qa.k_norm = static_cast<const bf16*>(w.k_norm.get());
    qa.positions = positions;
    qa.slots = slots;
    qa.k_plane = k_plane;
    qa.v_plane = v_plane;
    qa.inv_freq = static_cast<const float*>(inv_freq_.get());
    qa.rope_scale = s.rope.attention_scale;
    qa.eps = s.rms_norm_eps;
    qa.tokens = tokens;
    qa.heads = s.num_heads;
    qa.kv_heads = s.num_kv_heads;
    qa.head_dim = s.head_dim;
    HIQ_RETURN_IF_ERROR(mark(cuda::Stage::kNormElementwise));
    HIQ_RETURN_IF_ERROR(cuda::launch_qkv_finish(qa, stream));

    if (before_attention) {
      HIQ_RETURN_IF_ERROR(mark(cuda::Stage::kOther));
      HIQ_RETURN_IF_ERROR(before_attention(layer, stream));
    }
    attention.q = qkv;
    attention.q_token_stride = qkv_out;
    attention.out = attn_.as<bf16>();
    attention.k_plane = k_plane;
    attention.v_plane = v_plane;
    HIQ_RETURN_IF_ERROR(mark(cuda::Stage::kAttention));
    HIQ_RETURN_IF_ERROR(cuda::launch_attention(attention, stream));

    if (fused) {
      // The residual stream takes each product as it is stored; the MLP's
      // input is normalised and its gate applied inside the products.
      cuda::SkinnyFusion residual;
      residual.add_to_y = true;
      cuda::SkinnyFusion gate = normalized_by(w.post_norm);
      gate.silu_gate = true;
      HIQ_RETURN_IF_ERROR(mark(cuda::Stage::kGemm));
      HIQ_RETURN_IF_ERROR(gemms_.run_fused(attn_.as<bf16>(), tokens, static_cast<const bf16*>(w.o_proj.get()), hidden,
                                           q_out, x, residual));
      HIQ_RETURN_IF_ERROR(
          gemms_.run_fused(x, tokens, static_cast<const bf16*>(w.gate_up.get()), inter, hidden, act_.as<bf16>(), gate));
      HIQ_RETURN_IF_ERROR(gemms_.run_fused(act_.as<bf16>(), tokens, static_cast<const bf16*>(w.down.get()), hidden,
                                           inter, x, residual));
      continue;
    }
    // Past the last layer's attention a row matters only for its logits:
    // the rest of that layer runs on the rows whose logits are wanted, their
    // attention output gathered into qkv (read by nothing after attention)
    // and their residual stream into rows_.
    const bf16* attended = attn_.as<bf16>();
    if (wanted_rows_only && layer == s.num_layers - 1 && live > logit_rows) {
      HIQ_RETURN_IF_ERROR(mark(cuda::Stage::kNormElementwise));
      HIQ_RETURN_IF_ERROR(cuda::launch_gather_rows(attended, rows, logit_rows, q_out, qkv, stream));
      HIQ_RETURN_IF_ERROR(cuda::launch_gather_rows(x, rows, logit_rows, hidden, rows_.as<bf16>(), stream));
      attended = qkv;
      x = rows_.as<bf16>();
      live = logit_rows;
    }
    HIQ_RETURN_IF_ERROR(mark(cuda::Stage::kGemm));
    if (!w.o_bias && in_epilogue(attended, live, w.o_proj, hidden, q_out, x, cuda::Sm90Epilogue::kAddToY)) {
      HIQ_RETURN_IF_ERROR(cuda::launch_gemm_sm90(attended, live, static_cast<const bf16*>(w.o_proj.get()), hidden,
                                                 q_out, x, cuda::Sm90Epilogue::kAddToY, stream));
      pending = nullptr;
    } else {
      HIQ_RETURN_IF_ERROR(
          gemm(attended, live, static_cast<const bf16*>(w.o_proj.get()), hidden, q_out, delta, CUDA_R_16BF));
      HIQ_RETURN_IF_ERROR(reduce(delta, live));
      if (w.o_bias) {
        HIQ_RETURN_IF_ERROR(mark(cuda::Stage::kNormElementwise));
        HIQ_RETURN_IF_ERROR(
            cuda::launch_add_bias(delta, static_cast<const bf16*>(w.o_bias.get()), live, hidden, stream));
      }
      pending = delta;
    }
    HIQ_RETURN_IF_ERROR(mark(cuda::Stage::kNormElementwise));
    HIQ_RETURN_IF_ERROR(cuda::launch_add_rms_norm(x, pending, static_cast<const bf16*>(w.post_norm.get()), live, hidden,
                                                  s.rms_norm_eps, normed, stream));
    HIQ_RETURN_IF_ERROR(mark(cuda::Stage::kGemm));
    if (gate_in_product(live) && cuda::skinny_gemm_supports(normed, live, w.gate_up.get(), hidden,
                                                            act_.memory.get(), CUDA_R_16BF)) {
      cuda::SkinnyFusion gate;
      gate.silu_gate = true;
      HIQ_RETURN_IF_ERROR(gemms_.run_fused(normed, live, static_cast<const bf16*>(w.gate_up.get()), inter, hidden,
                                           act_.as<bf16>(), gate));
    } else if (in_epilogue(normed, live, w.gate_up, inter, hidden, act_.as<bf16>(), cuda::Sm90Epilogue::kSiluGate)) {
      HIQ_RETURN_IF_ERROR(cuda::launch_gemm_sm90(normed, live, static_cast<const bf16*>(w.gate_up.get()), inter,
                                                 hidden, act_.as<bf16>(), cuda::Sm90Epilogue::kSiluGate, stream));
    } else {
      HIQ_RETURN_IF_ERROR(gemm(normed, live, static_cast<const bf16*>(w.gate_up.get()), 2 * inter, hidden,
                               gate_up_.as<bf16>(), CUDA_R_16BF));
      HIQ_RETURN_IF_ERROR(mark(cuda::Stage::kNormElementwise));
      HIQ_RETURN_IF_ERROR(cuda::launch_silu_mul(gate_up_.as<bf16>(), live, inter, act_.as<bf16>(), stream));
    }
    HIQ_RETURN_IF_ERROR(mark(cuda::Stage::kGemm));
    if (in_epilogue(act_.as<bf16>(), live, w.down, hidden, inter, x, cuda::Sm90Epilogue::kAddToY)) {
      HIQ_RETURN_IF_ERROR(cuda::launch_gemm_sm90(act_.as<bf16>(), live, static_cast<const bf16*>(w.down.get()), hidden,
                                                 inter, x, cuda::Sm90Epilogue::kAddToY, stream));
      pending = nullptr;
    } else {
      HIQ_RETURN_IF_ERROR(
          gemm(act_.as<bf16>(), live, static_cast<const bf16*>(w.down.get()), hidden, inter, delta, CUDA_R_16BF));
      HIQ_RETURN_IF_ERROR(reduce(delta, live));
      pending = delta;
    }
  }
  HIQ_RETURN_IF_ERROR(mark(cuda::Stage::kNormElementwise));
  HIQ_RETURN_IF_ERROR(cuda::launch_add_rms_norm(x, pending, static_cast<const bf16*>(final_norm_.get()), live, hidden,
                                                s.rms_norm_eps, normed, stream));
  // The LM head's input: the wanted rows, unless the last layer kept only those.
  const bf16* head_input = normed;
  if (live > logit_rows) {
    HIQ_RETURN_IF_ERROR(cuda::launch_gather_rows(normed, rows, logit_rows, hidden, rows_.as<bf16>(), stream));
    head_input = rows_.as<bf16>();
  }
  HIQ_RETURN_IF_ERROR(mark(cuda::Stage::kLmHead));
  HIQ_RETURN_IF_ERROR(gemm(head_input, logit_rows, static_cast<const bf16*>(lm_head_.get()), s.vocab_size, hidden,
                           logits_.as<float>(), CUDA_R_32F));
  return cuda::launch_argmax(logits_.as<float>(), logit_rows, s.vocab_size, next_.as<int32_t>(), stream);
}

Status CudaModelImpl::download(LogitsWanted logits, int logit_rows) {
  // Into the staging buffer: the argmax of each real logit row, then the logits.
  const cudaStream_t stream = stream_.get();
  HIQ_RETURN_IF_ERROR(mark(cuda::Stage::kOther));
  auto* host = static_cast<std::byte*>(staging_.get());
  const auto rows = static_cast<size_t>(logit_rows);
  HIQ_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host, next_.memory.get(), rows * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  if (logits != LogitsWanted::kNone)
    HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host + align16(rows * sizeof(int32_t)), logits_.memory.get(),
                                             rows * shape_.vocab_size * sizeof(float), cudaMemcpyDeviceToHost, stream));
  return marks_.finish(stream);
}

}  // namespace

Result<std::unique_ptr<CudaModel>> make_cuda_model(const ModelShape& shape, const CpuModelWeights& weights,
                                                   const CudaModelOptions& options, RowParallelReduce reduce) {
  return CudaModelImpl::create(shape, weights, options, std::move(reduce));
}

}  // namespace hiq
