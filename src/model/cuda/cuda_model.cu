// CudaModel: weights on the GPU, one stream, cuBLAS for the matrix products
// (BF16 in, FP32 accumulate) and our kernels for the rest.
//
// One pass over a batch, T new tokens in all:
//   embed → for each layer: [add +] RMSNorm → QKV (one fused GEMM) → bias,
//   q/k-norm, RoPE, K/V into L1 → wait for the layer's restore → attention
//   over L1 → O proj → add + RMSNorm → gate|up (one fused GEMM) → SiLU·up →
//   down → … → add + final norm → gather the rows whose logits are wanted →
//   LM head (FP32 logits) → argmax.
// The per-pass inputs (token ids, positions, slots, sequence table) go up in
// one copy from a pinned staging buffer; the pass ends with one copy of the
// results back and a stream synchronisation. A profiled pass (ForwardProfile)
// also records an event at each boundary between stages of another kind.
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "codec/numeric.h"
#include "cuda/buffers.h"
#include "cuda/check.cuh"
#include "model/cuda/attention.h"
#include "model/cuda/model_kernels.h"
#include "model/cuda_model.h"

namespace hiq {
namespace {

using cuda::bf16;

Status cublas_status(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return Status::ok();
  return internal_error(std::string(what) + " failed: " + cublasGetStatusString(status));
}

struct CublasDestroy {
  void operator()(cublasHandle_t h) const { (void)cublasDestroy(h); }
};
using CublasHandle = cuda::Owned<cublasHandle_t, CublasDestroy>;

// Device memory that grows to the largest size asked for (contents are not kept).
struct Scratch {
  cuda::DeviceMemory memory;
  size_t bytes = 0;
  Status reserve(size_t wanted, const char* what) {
    if (wanted <= bytes) return Status::ok();
    memory.reset();
    bytes = 0;
    HIQ_ASSIGN_OR_RETURN(memory, cuda::device_alloc(wanted, what));
    bytes = wanted;
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

// The per-pass inputs, laid out in one buffer (offsets in bytes, 16-aligned).
struct PassLayout {
  size_t tokens = 0, positions = 0, slots = 0, sequences = 0, context_slots = 0, logit_rows = 0, bytes = 0;
};

size_t align16(size_t n) { return (n + 15) / 16 * 16; }

// The components of ForwardProfile.
enum class Stage : uint8_t { kGemm, kAttention, kNormElementwise, kLmHead, kOther };

// The events of a profiled pass: mark() opens a stage on the stream (a no-op
// when the pass is not profiled, or when the stage is of the kind already
// open), finish() closes the last one, read() charges the time between marks
// once the stream has synchronised. Events are created on first use and
// reused by later passes.
class StageMarks {
 public:
  void begin(bool profiled) {
    on_ = profiled;
    used_ = 0;
  }
  Status mark(Stage stage, cudaStream_t stream) {
    if (!on_ || (used_ > 0 && stages_[used_ - 1] == stage)) return Status::ok();
    return record(stage, stream);
  }
  Status finish(cudaStream_t stream) { return on_ ? record(Stage::kOther, stream) : Status::ok(); }
  Result<ForwardProfile> read() const {
    ForwardProfile p;
    for (size_t i = 0; i + 1 < used_; ++i) {
      float ms = 0;
      HIQ_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, events_[i].get(), events_[i + 1].get()));
      const double seconds = ms * 1e-3;
      switch (stages_[i]) {
        case Stage::kGemm: p.gemm_seconds += seconds; break;
        case Stage::kAttention: p.attention_seconds += seconds; break;
        case Stage::kNormElementwise: p.norm_elementwise_seconds += seconds; break;
        case Stage::kLmHead: p.lm_head_seconds += seconds; break;
        case Stage::kOther: p.other_seconds += seconds; break;
      }
    }
    return p;
  }

 private:
  Status record(Stage stage, cudaStream_t stream) {
    if (used_ == events_.size()) {
      HIQ_ASSIGN_OR_RETURN(cuda::Event e, cuda::make_event(/*timing=*/true));
      events_.push_back(std::move(e));
      stages_.push_back(stage);
    }
    stages_[used_] = stage;
    HIQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(events_[used_].get(), stream));
    ++used_;
    return Status::ok();
  }

  bool on_ = false;
  size_t used_ = 0;
  std::vector<cuda::Event> events_;
  std::vector<Stage> stages_;
};

class CudaModelImpl final : public CudaModel {
 public:
  static Result<std::unique_ptr<CudaModel>> create(const ModelShape& shape, const CpuModelWeights& weights);

  Result<ModelOutput> forward(DeviceKvPool& l1, std::span<const ModelSequence> batch, LogitsWanted logits,
                              const BeforeLayerAttention& before_attention, ForwardProfile* profile) override;
  void* stream() const override { return stream_.get(); }
  const ModelShape& shape() const override { return shape_; }
  size_t weight_bytes() const override { return weight_bytes_; }
  size_t workspace_bytes() const override;

 private:
  Status upload(const CpuModelWeights& w);
  // y[m][n] = x[m][k] · w[n][k]ᵀ, y in BF16 or FP32.
  Status gemm(const bf16* x, int m, const bf16* w, int n, int k, void* y, cudaDataType_t y_type);
  Status mark(Stage stage) { return marks_.mark(stage, stream_.get()); }
  Status run(DeviceKvPool& l1, std::span<const ModelSequence> batch, LogitsWanted logits,
             const BeforeLayerAttention& before_attention, int tokens, int logit_rows, int max_q_len,
             int max_kv_len, const PassLayout& layout);

  ModelShape shape_;
  int multiprocessors_ = 0;
  cuda::Stream stream_;
  CublasHandle cublas_;
  cuda::DeviceMemory cublas_workspace_;
  cuda::DeviceMemory embed_, final_norm_, lm_head_, inv_freq_;
  std::vector<DeviceLayer> layers_;
  size_t weight_bytes_ = 0;
  // Scratch, sized for the largest pass so far.
  Scratch x_, normed_, qkv_, attn_, delta_, gate_up_, act_, rows_, logits_, next_, attention_ws_, inputs_;
  cuda::PinnedMemory staging_;  // host side of inputs_ and of the results
  size_t staging_bytes_ = 0;
  StageMarks marks_;
};

Result<std::unique_ptr<CudaModel>> CudaModelImpl::create(const ModelShape& shape, const CpuModelWeights& weights) {
  HIQ_RETURN_IF_ERROR(check_weights(shape, weights));
  if (!cuda::attention_head_dim_supported(shape.head_dim))
    return invalid_argument("the CUDA backend has no attention kernel for head_dim " + std::to_string(shape.head_dim) +
                            " (16, 32, 64, 128 or 256)");
  HIQ_RETURN_IF_ERROR(cuda::require_gpu());
  auto model = std::unique_ptr<CudaModelImpl>(new CudaModelImpl());
  model->shape_ = shape;
  int device = 0;
  HIQ_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  HIQ_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&model->multiprocessors_, cudaDevAttrMultiProcessorCount, device));
  HIQ_ASSIGN_OR_RETURN(model->stream_, cuda::make_stream());
  cublasHandle_t handle = nullptr;
  HIQ_RETURN_IF_ERROR(cublas_status(cublasCreate(&handle), "cublasCreate"));
  model->cublas_ = CublasHandle(handle);
  HIQ_RETURN_IF_ERROR(cublas_status(cublasSetStream(handle, model->stream_.get()), "cublasSetStream"));
  // cuBLAS picks its fastest Hopper kernels only with a workspace of its own.
  constexpr size_t kCublasWorkspace = size_t{32} << 20;
  HIQ_ASSIGN_OR_RETURN(model->cublas_workspace_, cuda::device_alloc(kCublasWorkspace, "cuBLAS workspace"));
  HIQ_RETURN_IF_ERROR(cublas_status(cublasSetWorkspace(handle, model->cublas_workspace_.get(), kCublasWorkspace),
                                    "cublasSetWorkspace"));
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
  for (const Scratch* s : {&x_, &normed_, &qkv_, &attn_, &delta_, &gate_up_, &act_, &rows_, &logits_, &next_,
                           &attention_ws_, &inputs_})
    total += s->bytes;
  return total;
}

Status CudaModelImpl::gemm(const bf16* x, int m, const bf16* w, int n, int k, void* y, cudaDataType_t y_type) {
  // Column-major view: yᵀ[n][m] = w[n][k] · xᵀ[k][m], with w stored as wᵀ.
  const float one = 1.f, zero = 0.f;
  return cublas_status(cublasGemmEx(cublas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, CUDA_R_16BF, k, x,
                                    CUDA_R_16BF, k, &zero, y, y_type, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                       "cublasGemmEx");
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

  PassLayout layout;
  layout.tokens = 0;
  layout.positions = align16(layout.tokens + tokens * sizeof(int32_t));
  layout.slots = align16(layout.positions + tokens * sizeof(int32_t));
  layout.sequences = align16(layout.slots + tokens * sizeof(uint32_t));
  layout.context_slots = align16(layout.sequences + batch.size() * sizeof(cuda::AttentionSequence));
  layout.logit_rows = align16(layout.context_slots + context * sizeof(uint32_t));
  layout.bytes = align16(layout.logit_rows + logit_rows * sizeof(int32_t));
  // The staging buffer carries the inputs up, then the results back.
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
  auto* context_slots = reinterpret_cast<uint32_t*>(host + layout.context_slots);
  auto* rows = reinterpret_cast<int32_t*>(host + layout.logit_rows);
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

  marks_.begin(profile != nullptr);
  const Status status = run(l1, batch, logits, before_attention, static_cast<int>(tokens),
                            static_cast<int>(logit_rows), max_q_len, max_kv_len, layout);
  // Whatever happened, nothing may still be using the staging buffer or the
  // scratch space when we return.
  const Status synced = cuda::cuda_status(cudaStreamSynchronize(stream_.get()), "forward");
  HIQ_RETURN_IF_ERROR(status);
  HIQ_RETURN_IF_ERROR(synced);
  if (profile != nullptr) {
    HIQ_ASSIGN_OR_RETURN(*profile, marks_.read());
  }

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

Status CudaModelImpl::run(DeviceKvPool& l1, std::span<const ModelSequence> batch, LogitsWanted logits,
                          const BeforeLayerAttention& before_attention, int tokens, int logit_rows, int max_q_len,
                          int max_kv_len, const PassLayout& layout) {
  const ModelShape& s = shape_;
  const cudaStream_t stream = stream_.get();
  const int hidden = s.hidden_size, q_out = s.num_heads * s.head_dim, kv_out = s.num_kv_heads * s.head_dim;
  const int qkv_out = q_out + 2 * kv_out, inter = s.intermediate_size;
  const auto t = static_cast<size_t>(tokens);

  cuda::AttentionArgs attention;
  attention.num_sequences = static_cast<int>(batch.size());
  attention.max_q_len = max_q_len;
  attention.max_kv_len = max_kv_len;
  attention.num_tokens = tokens;
  attention.heads = s.num_heads;
  attention.kv_heads = s.num_kv_heads;
  attention.head_dim = s.head_dim;
  attention.scale = 1.f / std::sqrt(static_cast<float>(s.head_dim));
  attention.kernel = cuda::attention_kernel_for(attention, multiprocessors_);
  attention.splits = cuda::attention_splits(attention, multiprocessors_);

  HIQ_RETURN_IF_ERROR(inputs_.reserve(layout.bytes, "forward inputs"));
  HIQ_RETURN_IF_ERROR(x_.reserve(t * hidden * sizeof(bf16), "residual stream"));
  HIQ_RETURN_IF_ERROR(normed_.reserve(t * hidden * sizeof(bf16), "normalised activations"));
  HIQ_RETURN_IF_ERROR(qkv_.reserve(t * qkv_out * sizeof(bf16), "qkv"));
  HIQ_RETURN_IF_ERROR(attn_.reserve(t * q_out * sizeof(bf16), "attention output"));
  HIQ_RETURN_IF_ERROR(delta_.reserve(t * hidden * sizeof(bf16), "layer output"));
  HIQ_RETURN_IF_ERROR(gate_up_.reserve(t * 2 * inter * sizeof(bf16), "gate_up"));
  HIQ_RETURN_IF_ERROR(act_.reserve(t * inter * sizeof(bf16), "mlp activation"));
  HIQ_RETURN_IF_ERROR(rows_.reserve(static_cast<size_t>(logit_rows) * hidden * sizeof(bf16), "lm_head input"));
  HIQ_RETURN_IF_ERROR(logits_.reserve(static_cast<size_t>(logit_rows) * s.vocab_size * sizeof(float), "logits"));
  HIQ_RETURN_IF_ERROR(next_.reserve(static_cast<size_t>(logit_rows) * sizeof(int32_t), "next tokens"));
  HIQ_RETURN_IF_ERROR(attention_ws_.reserve(
      cuda::attention_workspace_floats(attention.splits, tokens, s.num_heads, s.head_dim) * sizeof(float),
      "attention workspace"));

  HIQ_RETURN_IF_ERROR(mark(Stage::kOther));
  HIQ_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(inputs_.memory.get(), staging_.get(), layout.bytes, cudaMemcpyHostToDevice, stream));
  const auto* in = inputs_.as<std::byte>();
  const auto* token_ids = reinterpret_cast<const int32_t*>(in + layout.tokens);
  const auto* positions = reinterpret_cast<const int32_t*>(in + layout.positions);
  const auto* slots = reinterpret_cast<const uint32_t*>(in + layout.slots);
  const auto* rows = reinterpret_cast<const int32_t*>(in + layout.logit_rows);
  attention.sequences = reinterpret_cast<const cuda::AttentionSequence*>(in + layout.sequences);
  attention.slots = reinterpret_cast<const uint32_t*>(in + layout.context_slots);
  attention.workspace = attention_ws_.as<float>();

  bf16* x = x_.as<bf16>();
  bf16* normed = normed_.as<bf16>();
  bf16* qkv = qkv_.as<bf16>();
  bf16* delta = delta_.as<bf16>();
  HIQ_RETURN_IF_ERROR(mark(Stage::kNormElementwise));
  HIQ_RETURN_IF_ERROR(cuda::launch_gather_rows(static_cast<const bf16*>(embed_.get()), token_ids, tokens, hidden, x,
                                               stream));
  for (int layer = 0; layer < s.num_layers; ++layer) {
    const DeviceLayer& w = layers_[static_cast<size_t>(layer)];
    HIQ_RETURN_IF_ERROR(mark(Stage::kNormElementwise));
    HIQ_RETURN_IF_ERROR(cuda::launch_add_rms_norm(x, layer == 0 ? nullptr : delta,
                                                  static_cast<const bf16*>(w.input_norm.get()), tokens, hidden,
                                                  s.rms_norm_eps, normed, stream));
    HIQ_RETURN_IF_ERROR(mark(Stage::kGemm));
    HIQ_RETURN_IF_ERROR(gemm(normed, tokens, static_cast<const bf16*>(w.qkv.get()), qkv_out, hidden, qkv, CUDA_R_16BF));

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
    HIQ_RETURN_IF_ERROR(mark(Stage::kNormElementwise));
    HIQ_RETURN_IF_ERROR(cuda::launch_qkv_finish(qa, stream));

    if (before_attention) {
      HIQ_RETURN_IF_ERROR(mark(Stage::kOther));
      HIQ_RETURN_IF_ERROR(before_attention(layer, stream));
    }
    attention.q = qkv;
    attention.q_token_stride = qkv_out;
    attention.out = attn_.as<bf16>();
    attention.k_plane = k_plane;
    attention.v_plane = v_plane;
    HIQ_RETURN_IF_ERROR(mark(Stage::kAttention));
    HIQ_RETURN_IF_ERROR(cuda::launch_attention(attention, stream));

    HIQ_RETURN_IF_ERROR(mark(Stage::kGemm));
    HIQ_RETURN_IF_ERROR(gemm(attn_.as<bf16>(), tokens, static_cast<const bf16*>(w.o_proj.get()), hidden, q_out, delta,
                             CUDA_R_16BF));
    HIQ_RETURN_IF_ERROR(mark(Stage::kNormElementwise));
    if (w.o_bias) HIQ_RETURN_IF_ERROR(cuda::launch_add_bias(delta, static_cast<const bf16*>(w.o_bias.get()), tokens,
                                                            hidden, stream));
    HIQ_RETURN_IF_ERROR(cuda::launch_add_rms_norm(x, delta, static_cast<const bf16*>(w.post_norm.get()), tokens,
                                                  hidden, s.rms_norm_eps, normed, stream));
    HIQ_RETURN_IF_ERROR(mark(Stage::kGemm));
    HIQ_RETURN_IF_ERROR(gemm(normed, tokens, static_cast<const bf16*>(w.gate_up.get()), 2 * inter, hidden,
                             gate_up_.as<bf16>(), CUDA_R_16BF));
    HIQ_RETURN_IF_ERROR(mark(Stage::kNormElementwise));
    HIQ_RETURN_IF_ERROR(cuda::launch_silu_mul(gate_up_.as<bf16>(), tokens, inter, act_.as<bf16>(), stream));
    HIQ_RETURN_IF_ERROR(mark(Stage::kGemm));
    HIQ_RETURN_IF_ERROR(
        gemm(act_.as<bf16>(), tokens, static_cast<const bf16*>(w.down.get()), hidden, inter, delta, CUDA_R_16BF));
  }
  HIQ_RETURN_IF_ERROR(mark(Stage::kNormElementwise));
  HIQ_RETURN_IF_ERROR(cuda::launch_add_rms_norm(x, delta, static_cast<const bf16*>(final_norm_.get()), tokens, hidden,
                                                s.rms_norm_eps, normed, stream));
  HIQ_RETURN_IF_ERROR(cuda::launch_gather_rows(normed, rows, logit_rows, hidden, rows_.as<bf16>(), stream));
  HIQ_RETURN_IF_ERROR(mark(Stage::kLmHead));
  HIQ_RETURN_IF_ERROR(gemm(rows_.as<bf16>(), logit_rows, static_cast<const bf16*>(lm_head_.get()), s.vocab_size,
                           hidden, logits_.as<float>(), CUDA_R_32F));
  HIQ_RETURN_IF_ERROR(cuda::launch_argmax(logits_.as<float>(), logit_rows, s.vocab_size, next_.as<int32_t>(), stream));

  // Results into the staging buffer: the argmax of every logit row, then the logits.
  HIQ_RETURN_IF_ERROR(mark(Stage::kOther));
  auto* host = static_cast<std::byte*>(staging_.get());
  HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host, next_.memory.get(), static_cast<size_t>(logit_rows) * sizeof(int32_t),
                                           cudaMemcpyDeviceToHost, stream));
  if (logits != LogitsWanted::kNone)
    HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host + align16(static_cast<size_t>(logit_rows) * sizeof(int32_t)),
                                             logits_.memory.get(),
                                             static_cast<size_t>(logit_rows) * s.vocab_size * sizeof(float),
                                             cudaMemcpyDeviceToHost, stream));
  return marks_.finish(stream);
}

}  // namespace

Result<std::unique_ptr<CudaModel>> make_cuda_model(const ModelShape& shape, const CpuModelWeights& weights) {
  return CudaModelImpl::create(shape, weights);
}

}  // namespace hiq
