// CudnnAttention (model/cuda/cudnn_attention.h): cuDNN loaded at run time,
// the flash-attention operation graph built through the backend API, plans
// cached by shape.
#include "model/cuda/cudnn_attention.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <limits>
#include <string_view>
#include <utility>
#include <vector>

#include "cuda/buffers.h"

#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
#define HIQ_HAVE_CUDNN_HEADER 1
#else
#define HIQ_HAVE_CUDNN_HEADER 0
#endif

namespace hiq::cuda {

Status validate_cudnn_attention_shape(const CudnnAttentionShape& s) {
  const auto bad = [](const std::string& why) { return invalid_argument("cuDNN attention: " + why); };
  if (s.q_len <= 0) return bad("q_len must be positive");
  if (s.kv_len < s.q_len) return bad("kv_len (" + std::to_string(s.kv_len) + ") must be at least q_len (" +
                                     std::to_string(s.q_len) + ")");
  if (s.heads <= 0 || s.kv_heads <= 0 || s.heads % s.kv_heads != 0)
    return bad("heads (" + std::to_string(s.heads) + ") must be a positive multiple of kv_heads (" +
               std::to_string(s.kv_heads) + ")");
  if (s.head_dim != 64 && s.head_dim != 128)
    return bad("head_dim must be 64 or 128, not " + std::to_string(s.head_dim));
  if (s.q_token_stride < static_cast<int64_t>(s.heads) * s.head_dim || s.q_token_stride % 8 != 0)
    return bad("Q's token stride (" + std::to_string(s.q_token_stride) +
               ") must hold every head and be a multiple of 8 elements (16 bytes)");
  return Status::ok();
}

#if HIQ_HAVE_CUDNN_HEADER

namespace {

// ---- the library ----------------------------------------------------------------

// The functions hiq calls, bound by dlsym from libcudnn.so.9 (which loads its
// sub-libraries, libcudnn_graph and the engines, itself).
struct CudnnApi {
  cudnnStatus_t (*create)(cudnnHandle_t*) = nullptr;
  cudnnStatus_t (*destroy)(cudnnHandle_t) = nullptr;
  cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t) = nullptr;
  size_t (*get_version)() = nullptr;
  const char* (*error_string)(cudnnStatus_t) = nullptr;
  void (*last_error_string)(char*, size_t) = nullptr;  // optional (9.0 has it; absent is tolerated)
  cudnnStatus_t (*create_descriptor)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t*) = nullptr;
  cudnnStatus_t (*destroy_descriptor)(cudnnBackendDescriptor_t) = nullptr;
  cudnnStatus_t (*set_attribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                                 int64_t, const void*) = nullptr;
  cudnnStatus_t (*get_attribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                                 int64_t, int64_t*, void*) = nullptr;
  cudnnStatus_t (*finalize)(cudnnBackendDescriptor_t) = nullptr;
  cudnnStatus_t (*execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t) = nullptr;
  std::string version;  // "9.19.0"
  size_t version_number = 0;

  // OK, or a Status naming the step, cuDNN's status and its last error message.
  Status check(cudnnStatus_t status, std::string_view step) const {
    if (status == CUDNN_STATUS_SUCCESS) return Status::ok();
    const char* name = error_string(status);
    std::string message = "cuDNN " + std::string(step) + ": " + (name != nullptr ? name : "error") + " (" +
                          std::to_string(static_cast<int>(status)) + ")";
    if (last_error_string != nullptr) {
      std::array<char, 2048> last{};
      last_error_string(last.data(), last.size());
      if (last[0] != '\0') message += "; " + std::string(last.data());
    }
    // 1xxx: a sub-library (engines, NVRTC) could not be loaded; 3xxx: this
    // cuDNN, GPU or graph is not supported — an absent backend, not a bug.
    const int code = static_cast<int>(status);
    const bool absent = (code >= 1000 && code < 2000) || (code >= 3000 && code < 4000);
    return absent ? unavailable(std::move(message)) : internal_error(std::move(message));
  }
};

template <typename F>
bool bind(void* library, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(library, name));
  return f != nullptr;
}

Result<const CudnnApi*> cudnn() {
  static const Result<const CudnnApi*> api = []() -> Result<const CudnnApi*> {
    void* library = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    std::string first_error = library == nullptr ? dlerror() : "";
    if (library == nullptr) library = dlopen("/usr/local/cuda/lib64/libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr)
      return unavailable("cuDNN 9 could not be loaded (" + first_error +
                         "; also not at /usr/local/cuda/lib64): put its folder on LD_LIBRARY_PATH");
    static CudnnApi a;
    if (!bind(library, "cudnnCreate", a.create) || !bind(library, "cudnnDestroy", a.destroy) ||
        !bind(library, "cudnnSetStream", a.set_stream) || !bind(library, "cudnnGetVersion", a.get_version) ||
        !bind(library, "cudnnGetErrorString", a.error_string) ||
        !bind(library, "cudnnBackendCreateDescriptor", a.create_descriptor) ||
        !bind(library, "cudnnBackendDestroyDescriptor", a.destroy_descriptor) ||
        !bind(library, "cudnnBackendSetAttribute", a.set_attribute) ||
        !bind(library, "cudnnBackendGetAttribute", a.get_attribute) ||
        !bind(library, "cudnnBackendFinalize", a.finalize) || !bind(library, "cudnnBackendExecute", a.execute))
      return unavailable("the cuDNN library found lacks a backend-API function hiq calls");
    (void)bind(library, "cudnnGetLastErrorString", a.last_error_string);
    a.version_number = a.get_version();
    const size_t major = a.version_number / 10000, minor = a.version_number / 100 % 100,
                 patch = a.version_number % 100;
    a.version = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
    if (major != CUDNN_MAJOR)
      return unavailable("cuDNN " + a.version + " was loaded; hiq is built for cuDNN " +
                         std::to_string(CUDNN_MAJOR) + ".x");
    return &a;
  }();
  return api;
}

// ---- descriptors ------------------------------------------------------------------

// An owned backend descriptor.
class Descriptor {
 public:
  Descriptor() = default;
  Descriptor(const CudnnApi* api, cudnnBackendDescriptor_t d) : api_(api), d_(d) {}
  ~Descriptor() {
    if (d_ != nullptr) (void)api_->destroy_descriptor(d_);
  }
  Descriptor(Descriptor&& o) noexcept : api_(o.api_), d_(std::exchange(o.d_, nullptr)) {}
  Descriptor& operator=(Descriptor&& o) noexcept {
    std::swap(api_, o.api_);
    std::swap(d_, o.d_);
    return *this;
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  const CudnnApi* api_ = nullptr;
  cudnnBackendDescriptor_t d_ = nullptr;
};

// Sets one attribute of a descriptor; the error names the attribute and what it was for.
#define HIQ_CUDNN_SET(desc, attribute, type, count, values, context)                                          \
  HIQ_RETURN_IF_ERROR(api_.check(api_.set_attribute((desc), (attribute), (type), (count), (values)),         \
                                 std::string(context) + ": setting " #attribute))

// Tensors passed to every execution (non-virtual), by unique id.
enum TensorId : int64_t {
  kQ = 1,
  kK = 2,
  kV = 3,
  kO = 4,
  kScale = 5,         // FP32 by value: the softmax scale
  kKvLen = 6,         // INT32 by value: S_kv, for the bottom-right diagonal
  kQLen = 7,          // INT32 by value: S_q
  kNegativeInf = 8,   // FP32 by value: what masked scores become
  kFirstVirtual = 100,
};

using Dims = std::array<int64_t, 4>;

// A tensor of the graph: [b][h][rows][columns] dims with their strides.
struct TensorSpec {
  const char* name;
  cudnnDataType_t type;
  Dims dims, strides;
  bool is_virtual = true;
  bool by_value = false;
};

// Builds one operation graph and its plan; every descriptor it makes is kept
// in `owned` (the plan's lifetime).
class GraphBuilder {
 public:
  GraphBuilder(const CudnnApi& api, std::vector<Descriptor>& owned) : api_(api), owned_(owned) {}

  Result<cudnnBackendDescriptor_t> make(cudnnBackendDescriptorType_t type, std::string_view what) {
    cudnnBackendDescriptor_t d = nullptr;
    HIQ_RETURN_IF_ERROR(
        api_.check(api_.create_descriptor(type, &d), "creating the descriptor of " + std::string(what)));
    owned_.emplace_back(&api_, d);
    return d;
  }

  Result<cudnnBackendDescriptor_t> tensor(const TensorSpec& t, int64_t uid) {
    const std::string what = std::string("tensor ") + t.name;
    HIQ_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t d, make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, what));
    const int64_t alignment = 16;
    HIQ_CUDNN_SET(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t.type, what);
    HIQ_CUDNN_SET(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t.dims.data(), what);
    HIQ_CUDNN_SET(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t.strides.data(), what);
    HIQ_CUDNN_SET(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what);
    HIQ_CUDNN_SET(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, what);
    if (t.is_virtual) {
      const bool yes = true;
      HIQ_CUDNN_SET(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes, what);
    }
    if (t.by_value) {
      const bool yes = true;
      HIQ_CUDNN_SET(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes, what);
    }
    HIQ_RETURN_IF_ERROR(api_.check(api_.finalize(d), "finalizing " + what));
    return d;
  }

  // A virtual intermediate, numbered in order of creation.
  Result<cudnnBackendDescriptor_t> intermediate(const TensorSpec& t) { return tensor(t, next_virtual_++); }

  // y = op(x[, b[, t]]) elementwise, computed in `precision`.
  Status pointwise(const char* name, cudnnPointwiseMode_t mode, cudnnDataType_t precision,
                   cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                   cudnnBackendDescriptor_t y, int64_t axis = -1) {
    const std::string what = std::string("pointwise ") + name;
    HIQ_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t pw, make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what));
    HIQ_CUDNN_SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what);
    HIQ_CUDNN_SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision, what);
    if (mode == CUDNN_POINTWISE_GEN_INDEX)
      HIQ_CUDNN_SET(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, what);
    HIQ_RETURN_IF_ERROR(api_.check(api_.finalize(pw), "finalizing " + what));

    HIQ_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t op, make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what));
    HIQ_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, what);
    HIQ_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
    if (b != nullptr)
      HIQ_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, what);
    if (t != nullptr)
      HIQ_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, what);
    HIQ_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
    const float one = 1.f;
    HIQ_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one, what);
    HIQ_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one, what);
    HIQ_RETURN_IF_ERROR(api_.check(api_.finalize(op), "finalizing " + what));
    ops_.push_back(op);
    return Status::ok();
  }

  // y = reduce(x) over the last dim.
  Status reduction(const char* name, cudnnReduceTensorOp_t reduce, cudnnBackendDescriptor_t x,
                   cudnnBackendDescriptor_t y) {
    const std::string what = std::string("reduction ") + name;
    HIQ_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t r, make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what));
    const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
    HIQ_CUDNN_SET(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &fp32, what);
    HIQ_CUDNN_SET(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce, what);
    HIQ_RETURN_IF_ERROR(api_.check(api_.finalize(r), "finalizing " + what));

    HIQ_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t op, make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what));
    HIQ_CUDNN_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r, what);
    HIQ_CUDNN_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
    HIQ_CUDNN_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
    HIQ_RETURN_IF_ERROR(api_.check(api_.finalize(op), "finalizing " + what));
    ops_.push_back(op);
    return Status::ok();
  }

  // c = a · b (batched over the first two dims), FP32 accumulation.
  Status matmul(const char* name, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    const std::string what = std::string("matmul ") + name;
    HIQ_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t mm, make(CUDNN_BACKEND_MATMUL_DESCRIPTOR, what));
    const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
    HIQ_CUDNN_SET(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &fp32, what);
    HIQ_RETURN_IF_ERROR(api_.check(api_.finalize(mm), "finalizing " + what));

    HIQ_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t op, make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what));
    HIQ_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, what);
    HIQ_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, what);
    HIQ_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, what);
    HIQ_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm, what);
    HIQ_RETURN_IF_ERROR(api_.check(api_.finalize(op), "finalizing " + what));
    ops_.push_back(op);
    return Status::ok();
  }

  // The operation graph of every operation added so far, in order.
  Result<cudnnBackendDescriptor_t> graph(cudnnHandle_t handle) {
    HIQ_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t g, make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph"));
    HIQ_CUDNN_SET(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops_.size()),
                  ops_.data(), "operation graph");
    HIQ_CUDNN_SET(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "operation graph");
    HIQ_RETURN_IF_ERROR(api_.check(api_.finalize(g), "finalizing the operation graph (no engine knows this pattern)"));
    return g;
  }

 private:
  const CudnnApi& api_;
  std::vector<Descriptor>& owned_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_virtual_ = kFirstVirtual;
};

#undef HIQ_CUDNN_SET

// ---- plans -----------------------------------------------------------------------

struct Plan {
  CudnnAttentionShape shape;
  std::vector<Descriptor> owned;  // tensors, operations, graph, engine configs, the plan
  cudnnBackendDescriptor_t plan = nullptr;
  size_t workspace_bytes = 0;
  std::string engine;
  uint64_t last_used = 0;
};

// The flash-attention graph of one sequence (see the header for the pattern).
Result<cudnnBackendDescriptor_t> build_graph(const CudnnApi& api, cudnnHandle_t handle, const CudnnAttentionShape& s,
                                             std::vector<Descriptor>& owned) {
  GraphBuilder g(api, owned);
  const int64_t h = s.heads, hk = s.kv_heads, sq = s.q_len, skv = s.kv_len, d = s.head_dim, ts = s.q_token_stride;
  // I/O: Q and O as [b][h][token][d] over our token-major rows; Kᵀ as
  // [b][h_kv][d][token] over K's [token][h_kv][d] rows (strides alone transpose it).
  const cudnnDataType_t bf16 = CUDNN_DATA_BFLOAT16;
  HIQ_ASSIGN_OR_RETURN(auto q, g.tensor({"Q", bf16, {1, h, sq, d}, {sq * ts, d, ts, 1}, false}, kQ));
  HIQ_ASSIGN_OR_RETURN(auto kt, g.tensor({"K", bf16, {1, hk, d, skv}, {skv * hk * d, d, 1, hk * d}, false}, kK));
  HIQ_ASSIGN_OR_RETURN(auto v, g.tensor({"V", bf16, {1, hk, skv, d}, {skv * hk * d, d, hk * d, 1}, false}, kV));
  HIQ_ASSIGN_OR_RETURN(auto o, g.tensor({"O", bf16, {1, h, sq, d}, {sq * h * d, d, h * d, 1}, false}, kO));
  const Dims one = {1, 1, 1, 1};
  HIQ_ASSIGN_OR_RETURN(auto scale, g.tensor({"scale", CUDNN_DATA_FLOAT, one, one, false, true}, kScale));
  HIQ_ASSIGN_OR_RETURN(auto kv_len, g.tensor({"S_kv", CUDNN_DATA_INT32, one, one, false, true}, kKvLen));
  HIQ_ASSIGN_OR_RETURN(auto q_len, g.tensor({"S_q", CUDNN_DATA_INT32, one, one, false, true}, kQLen));
  HIQ_ASSIGN_OR_RETURN(auto negative_inf, g.tensor({"-inf", CUDNN_DATA_FLOAT, one, one, false, true}, kNegativeInf));

  // Scores [b][h][S_q][S_kv] and per-row statistics [b][h][S_q][1], all virtual.
  const Dims scores = {1, h, sq, skv}, score_strides = {h * sq * skv, sq * skv, skv, 1};
  const Dims rows = {1, h, sq, 1}, row_strides = {h * sq, sq, 1, 1};
  const auto score = [&](const char* name, cudnnDataType_t type) {
    return g.intermediate({name, type, scores, score_strides});
  };
  HIQ_ASSIGN_OR_RETURN(auto s_raw, score("S", CUDNN_DATA_FLOAT));
  HIQ_RETURN_IF_ERROR(g.matmul("Q·Kᵀ", q, kt, s_raw));
  HIQ_ASSIGN_OR_RETURN(auto s_scaled, score("S·scale", CUDNN_DATA_FLOAT));
  HIQ_RETURN_IF_ERROR(g.pointwise("scale", CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, s_raw, scale, nullptr, s_scaled));

  // Bottom-right causal mask: keep column ≤ row + S_kv − S_q.
  HIQ_ASSIGN_OR_RETURN(auto row, score("row", CUDNN_DATA_INT32));
  HIQ_RETURN_IF_ERROR(
      g.pointwise("row index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, s_scaled, nullptr, nullptr, row, 2));
  HIQ_ASSIGN_OR_RETURN(auto column, score("column", CUDNN_DATA_INT32));
  HIQ_RETURN_IF_ERROR(
      g.pointwise("column index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, s_scaled, nullptr, nullptr, column, 3));
  HIQ_ASSIGN_OR_RETURN(auto row_plus_kv, score("row+S_kv", CUDNN_DATA_INT32));
  HIQ_RETURN_IF_ERROR(
      g.pointwise("row+S_kv", CUDNN_POINTWISE_ADD, CUDNN_DATA_INT32, row, kv_len, nullptr, row_plus_kv));
  HIQ_ASSIGN_OR_RETURN(auto diagonal, score("row+S_kv-S_q", CUDNN_DATA_INT32));
  HIQ_RETURN_IF_ERROR(
      g.pointwise("row+S_kv-S_q", CUDNN_POINTWISE_SUB, CUDNN_DATA_INT32, row_plus_kv, q_len, nullptr, diagonal));
  HIQ_ASSIGN_OR_RETURN(auto visible, score("visible", CUDNN_DATA_BOOLEAN));
  HIQ_RETURN_IF_ERROR(
      g.pointwise("diagonal>=column", CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, diagonal, column, nullptr, visible));
  HIQ_ASSIGN_OR_RETURN(auto s_masked, score("S masked", CUDNN_DATA_FLOAT));
  HIQ_RETURN_IF_ERROR(g.pointwise("causal select", CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, s_scaled,
                                  negative_inf, visible, s_masked));

  // Softmax, P in the inputs' type (the second product's operand).
  HIQ_ASSIGN_OR_RETURN(auto row_max, g.intermediate({"row max", CUDNN_DATA_FLOAT, rows, row_strides}));
  HIQ_RETURN_IF_ERROR(g.reduction("max", CUDNN_REDUCE_TENSOR_MAX, s_masked, row_max));
  HIQ_ASSIGN_OR_RETURN(auto shifted, score("S-max", CUDNN_DATA_FLOAT));
  HIQ_RETURN_IF_ERROR(g.pointwise("S-max", CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, s_masked, row_max, nullptr, shifted));
  HIQ_ASSIGN_OR_RETURN(auto exps, score("exp", CUDNN_DATA_FLOAT));
  HIQ_RETURN_IF_ERROR(g.pointwise("exp", CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, shifted, nullptr, nullptr, exps));
  HIQ_ASSIGN_OR_RETURN(auto row_sum, g.intermediate({"row sum", CUDNN_DATA_FLOAT, rows, row_strides}));
  HIQ_RETURN_IF_ERROR(g.reduction("sum", CUDNN_REDUCE_TENSOR_ADD, exps, row_sum));
  HIQ_ASSIGN_OR_RETURN(auto p, score("P", CUDNN_DATA_BFLOAT16));
  HIQ_RETURN_IF_ERROR(g.pointwise("exp/sum", CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, exps, row_sum, nullptr, p));

  HIQ_RETURN_IF_ERROR(g.matmul("P·V", p, v, o));
  return g.graph(handle);
}

// The first engine config of `mode`'s heuristics whose plan finalizes; the
// reasons of those that did not in `tried`.
Result<cudnnBackendDescriptor_t> plan_from_heuristics(const CudnnApi& api, cudnnHandle_t handle,
                                                      cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode,
                                                      const char* mode_name, std::vector<Descriptor>& owned,
                                                      std::string& engine, std::string& tried) {
  const auto make = [&](cudnnBackendDescriptorType_t type, const char* what) -> Result<cudnnBackendDescriptor_t> {
    cudnnBackendDescriptor_t d = nullptr;
    HIQ_RETURN_IF_ERROR(api.check(api.create_descriptor(type, &d), std::string("creating ") + what));
    owned.emplace_back(&api, d);
    return d;
  };
  const std::string step = std::string("heuristics mode ") + mode_name;
  HIQ_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t heuristics, make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, step.c_str()));
  HIQ_RETURN_IF_ERROR(api.check(api.set_attribute(heuristics, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph),
                                step + ": setting the operation graph"));
  HIQ_RETURN_IF_ERROR(
      api.check(api.set_attribute(heuristics, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode),
                step + ": setting the mode"));
  HIQ_RETURN_IF_ERROR(api.check(api.finalize(heuristics), step + ": finalizing"));
  int64_t count = 0;
  HIQ_RETURN_IF_ERROR(api.check(
      api.get_attribute(heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
      step + ": counting its engine configs"));
  if (count <= 0) {
    tried += "; " + step + " proposed no engine";
    return unavailable(tried);
  }
  std::vector<cudnnBackendDescriptor_t> configs(static_cast<size_t>(count));
  for (auto& config : configs) {
    HIQ_ASSIGN_OR_RETURN(config, make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "an engine config"));
  }
  int64_t returned = 0;
  HIQ_RETURN_IF_ERROR(api.check(api.get_attribute(heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned, configs.data()),
                                step + ": reading its engine configs"));
  configs.resize(static_cast<size_t>(std::clamp<int64_t>(returned, 0, count)));
  for (size_t i = 0; i < configs.size(); ++i) {
    cudnnBackendDescriptor_t config = configs[i];
    // Its engine's global index, for the report (a failure here only loses the name).
    int64_t index = -1;
    cudnnBackendDescriptor_t engine_desc = nullptr;
    if (api.create_descriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine_desc) == CUDNN_STATUS_SUCCESS) {
      Descriptor owned_engine(&api, engine_desc);
      int64_t n = 0;
      if (api.get_attribute(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine_desc) ==
          CUDNN_STATUS_SUCCESS)
        (void)api.get_attribute(engine_desc, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);
    }
    const std::string name = "engine " + std::to_string(index) + " (" + step + ", config " + std::to_string(i) + ")";
    HIQ_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t plan, make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "a plan"));
    Status s = api.check(api.set_attribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle),
                         name + ": setting the plan's handle");
    if (s.is_ok())
      s = api.check(api.set_attribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                      &config),
                    name + ": setting the plan's engine config");
    if (s.is_ok()) s = api.check(api.finalize(plan), name + ": finalizing its plan");
    if (s.is_ok()) {
      engine = name;
      return plan;
    }
    tried += "; " + s.message();
  }
  return unavailable(tried);
}

}  // namespace

// ---- CudnnAttention ------------------------------------------------------------------

struct CudnnAttention::Impl {
  const CudnnApi* api = nullptr;
  cudnnHandle_t handle = nullptr;
  int device = 0;
  CudnnAttentionOptions options;
  CudnnAttentionStats stats;
  std::vector<std::unique_ptr<Plan>> plans;
  uint64_t clock = 0;
  float negative_inf = -std::numeric_limits<float>::infinity();

  ~Impl() {
    plans.clear();  // descriptors before the handle they were made with
    if (handle != nullptr) (void)api->destroy(handle);
  }

  // Shapes this cuDNN is known to get wrong, which the frontend refuses for
  // it (its SDPA support checks): no plan, so that ours runs instead.
  Status known_bad(const CudnnAttentionShape& shape) const {
    const size_t v = api->version_number;
    const std::string in = "cuDNN " + api->version + " ";
    if (v >= 91000 && v < 91002) return unavailable(in + "has known bugs in BF16 SDPA forward (9.10.0, 9.10.1)");
    if (v < 90600 && (shape.q_len % 64 != 0 || shape.kv_len % 64 != 0))
      return unavailable(in + "takes a bottom-right causal mask only for lengths that are multiples of 64");
    if (v < 91000 && shape.q_len == 1) return unavailable(in + "mishandles a causal mask over one query token");
    return Status::ok();
  }

  Result<Plan*> plan_for(const CudnnAttentionShape& shape) {
    HIQ_RETURN_IF_ERROR(validate_cudnn_attention_shape(shape));
    HIQ_RETURN_IF_ERROR(known_bad(shape));
    ++clock;
    for (auto& p : plans)
      if (p->shape == shape) {
        p->last_used = clock;
        ++stats.plan_hits;
        return p.get();
      }
    auto plan = std::make_unique<Plan>();
    plan->shape = shape;
    const std::string context = "the attention plan for q_len " + std::to_string(shape.q_len) + ", kv_len " +
                                std::to_string(shape.kv_len) + ", " + std::to_string(shape.heads) + "/" +
                                std::to_string(shape.kv_heads) + " heads of " + std::to_string(shape.head_dim);
    auto graph = build_graph(*api, handle, shape, plan->owned);
    if (!graph) return graph.status().with_context(context);
    std::string tried = "cuDNN " + api->version + " has no engine for " + context;
    auto made = plan_from_heuristics(*api, handle, *graph, CUDNN_HEUR_MODE_A, "A", plan->owned, plan->engine, tried);
    if (!made && made.status().code() == StatusCode::kUnavailable)
      made = plan_from_heuristics(*api, handle, *graph, CUDNN_HEUR_MODE_FALLBACK, "fallback", plan->owned,
                                  plan->engine, tried);
    if (!made) return made.status();
    plan->plan = *made;
    int64_t workspace = 0, n = 0;
    HIQ_RETURN_IF_ERROR(api->check(api->get_attribute(plan->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                      CUDNN_TYPE_INT64, 1, &n, &workspace),
                                   "reading the workspace size of " + context));
    plan->workspace_bytes = static_cast<size_t>(std::max<int64_t>(workspace, 0));
    plan->last_used = clock;
    ++stats.plans_built;
    if (plans.size() >= std::max<size_t>(options.max_plans, 1)) {
      auto oldest = std::min_element(plans.begin(), plans.end(),
                                     [](const auto& a, const auto& b) { return a->last_used < b->last_used; });
      plans.erase(oldest);
      ++stats.plans_dropped;
    }
    plans.push_back(std::move(plan));
    return plans.back().get();
  }
};

CudnnAttention::CudnnAttention(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnAttention::~CudnnAttention() = default;

Result<std::unique_ptr<CudnnAttention>> CudnnAttention::create(const CudnnAttentionOptions& options) {
  HIQ_ASSIGN_OR_RETURN(const CudnnApi* api, cudnn());
  auto impl = std::make_unique<Impl>();
  impl->api = api;
  impl->options = options;
  const cudaError_t device_error = cudaGetDevice(&impl->device);
  if (device_error != cudaSuccess)
    return unavailable("cuDNN attention needs a GPU: " + cuda_error(device_error, "cudaGetDevice").message());
  const cudnnStatus_t created = api->create(&impl->handle);
  if (created != CUDNN_STATUS_SUCCESS) {
    impl->handle = nullptr;
    const Status s = api->check(created, "cudnnCreate");
    return unavailable("cuDNN " + api->version + " could not start on this GPU: " + s.message());
  }
  // Before 9.10 some engines take the lowest float for a masked score rather than −inf.
  if (api->version_number < 91000) impl->negative_inf = std::numeric_limits<float>::lowest();
  return std::unique_ptr<CudnnAttention>(new CudnnAttention(std::move(impl)));
}

const std::string& CudnnAttention::version() const { return impl_->api->version; }

const CudnnAttentionStats& CudnnAttention::stats() const { return impl_->stats; }

Result<size_t> CudnnAttention::prepare(const CudnnAttentionShape& shape) {
  HIQ_ASSIGN_OR_RETURN(Plan * plan, impl_->plan_for(shape));
  return plan->workspace_bytes;
}

Result<std::string> CudnnAttention::engine_of(const CudnnAttentionShape& shape) {
  HIQ_ASSIGN_OR_RETURN(Plan * plan, impl_->plan_for(shape));
  return plan->engine;
}

Status CudnnAttention::run(const CudnnAttentionArgs& a, cudaStream_t stream) {
  const CudnnApi& api = *impl_->api;
  int device = 0;
  const cudaError_t device_error = cudaGetDevice(&device);
  if (device_error != cudaSuccess) return cuda_error(device_error, "cudaGetDevice");
  if (device != impl_->device)
    return failed_precondition("cuDNN attention was made on GPU " + std::to_string(impl_->device) +
                               ", but GPU " + std::to_string(device) + " is current");
  const auto misaligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 != 0; };
  if (a.q == nullptr || a.k == nullptr || a.v == nullptr || a.out == nullptr)
    return invalid_argument("cuDNN attention: Q, K, V and the output must all be given");
  if (misaligned(a.q) || misaligned(a.k) || misaligned(a.v) || misaligned(a.out) ||
      (a.workspace != nullptr && misaligned(a.workspace)))
    return invalid_argument("cuDNN attention: every buffer must be 16-byte aligned");
  HIQ_ASSIGN_OR_RETURN(Plan * plan, impl_->plan_for(a.shape));
  if (a.workspace_bytes < plan->workspace_bytes || (plan->workspace_bytes > 0 && a.workspace == nullptr))
    return invalid_argument("cuDNN attention: the plan needs " + std::to_string(plan->workspace_bytes) +
                            " bytes of workspace, " + std::to_string(a.workspace_bytes) + " were given");
  HIQ_RETURN_IF_ERROR(api.check(api.set_stream(impl_->handle, stream), "cudnnSetStream"));

  // By-value tensors point at host values, read when the work is enqueued.
  float scale = a.scale, negative_inf = impl_->negative_inf;
  int32_t kv_len = a.shape.kv_len, q_len = a.shape.q_len;
  const std::array<int64_t, 8> ids = {kQ, kK, kV, kO, kScale, kKvLen, kQLen, kNegativeInf};
  std::array<void*, 8> pointers = {const_cast<__nv_bfloat16*>(a.q), const_cast<__nv_bfloat16*>(a.k),
                                   const_cast<__nv_bfloat16*>(a.v), a.out, &scale, &kv_len, &q_len, &negative_inf};
  cudnnBackendDescriptor_t pack = nullptr;
  HIQ_RETURN_IF_ERROR(
      api.check(api.create_descriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack), "creating the variant pack"));
  const Descriptor owned_pack(&api, pack);
  void* workspace = a.workspace;
  HIQ_RETURN_IF_ERROR(api.check(api.set_attribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                                  static_cast<int64_t>(ids.size()), ids.data()),
                                "setting the variant pack's tensor ids"));
  HIQ_RETURN_IF_ERROR(api.check(api.set_attribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                                  static_cast<int64_t>(pointers.size()), pointers.data()),
                                "setting the variant pack's pointers"));
  HIQ_RETURN_IF_ERROR(api.check(
      api.set_attribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace),
      "setting the variant pack's workspace"));
  HIQ_RETURN_IF_ERROR(api.check(api.finalize(pack), "finalizing the variant pack"));
  return api.check(api.execute(impl_->handle, plan->plan, pack), "executing " + plan->engine);
}

#else  // no cuDNN headers at build time: the backend is absent

struct CudnnAttention::Impl {
  std::string version;
  CudnnAttentionStats stats;
};

CudnnAttention::CudnnAttention(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnAttention::~CudnnAttention() = default;

Result<std::unique_ptr<CudnnAttention>> CudnnAttention::create(const CudnnAttentionOptions&) {
  return unavailable("this build found no cuDNN headers (cudnn_graph.h): the cuDNN attention backend is absent");
}
const std::string& CudnnAttention::version() const { return impl_->version; }
const CudnnAttentionStats& CudnnAttention::stats() const { return impl_->stats; }
Result<size_t> CudnnAttention::prepare(const CudnnAttentionShape&) { return unavailable("built without cuDNN"); }
Result<std::string> CudnnAttention::engine_of(const CudnnAttentionShape&) {
  return unavailable("built without cuDNN");
}
Status CudnnAttention::run(const CudnnAttentionArgs&, cudaStream_t) { return unavailable("built without cuDNN"); }

#endif  // HIQ_HAVE_CUDNN_HEADER

}  // namespace hiq::cuda
