// CudaTpModel: one CudaModel per rank, each on its GPU, and the collective
// their row-parallel products meet through (model/cuda_tp_model.h).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <shared_mutex>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#if __has_include(<nccl.h>)
#include <nccl.h>
#define HIQ_HAVE_NCCL_HEADER 1
#else
#define HIQ_HAVE_NCCL_HEADER 0
#endif

#include "cuda/buffers.h"
#include "cuda/check.cuh"
#include "model/cuda_tp_model.h"
#include "model/tensor_parallel.h"
#include "model/tp_rendezvous.h"

namespace hiq {
namespace {

using bf16 = __nv_bfloat16;

Status rank_error(int rank, const Status& status) {
  return Status(status.code(), "tensor-parallel rank " + std::to_string(rank) + ": " + status.message());
}

// Every reduce starts with a meeting of the ranks on the host: a rank that
// failed before it (its pass left) is seen there by all, and none enqueues
// the sum, so the device never waits for a rank that will not come.
class Collective {
 public:
  virtual ~Collective() = default;
  // Replaces `partial` by the sum of every rank's, on `stream` (rank r's).
  virtual Status reduce(int rank, bf16* partial, size_t elements, cudaStream_t stream, TpRendezvous& pass) = 0;
  // Whether an earlier failure left it unusable (the error), else ok.
  virtual Status usable() const { return Status::ok(); }
  // Rank `rank` is leaving `pass` in error, its stream possibly stopped by a
  // device fault after sums it enqueued.
  virtual void rank_left(int /*rank*/, const TpRendezvous& /*pass*/) {}
};

// ---- ours: rank-order FP32 sums over peer (or same-device) pointers ----------

constexpr int kMaxPeerRanks = 8;

struct Partials {
  const bf16* rank[kMaxPeerRanks];
};

// out[i] = Σ_r partials.rank[r][i], in rank order in FP32, rounded once.
__global__ void sum_partials(Partials partials, int ranks, size_t n, bf16* out) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    float sum = 0.f;
    for (int r = 0; r < ranks; ++r) sum += __bfloat162float(partials.rank[r][i]);
    out[i] = __float2bfloat16_rn(sum);
  }
}

class PeerCollective final : public Collective {
 public:
  static Result<std::unique_ptr<Collective>> create(const std::vector<int>& devices) {
    const int n = static_cast<int>(devices.size());
    if (n > kMaxPeerRanks)
      return invalid_argument("the peer collective takes at most " + std::to_string(kMaxPeerRanks) + " ranks, not " +
                              std::to_string(n) + " (use nccl)");
    auto c = std::unique_ptr<PeerCollective>(new PeerCollective());
    c->ranks_.resize(devices.size());
    for (int r = 0; r < n; ++r) {
      HIQ_CUDA_RETURN_IF_ERROR(cudaSetDevice(devices[r]));
      for (int q = 0; q < n; ++q) {
        if (devices[q] == devices[r]) continue;
        int can = 0;
        HIQ_CUDA_RETURN_IF_ERROR(cudaDeviceCanAccessPeer(&can, devices[r], devices[q]));
        if (!can)
          return invalid_argument("GPU " + std::to_string(devices[r]) + " cannot read GPU " +
                                  std::to_string(devices[q]) + "'s memory (no peer access): use the nccl collective");
        const cudaError_t err = cudaDeviceEnablePeerAccess(devices[q], 0);
        if (err == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
        else HIQ_CUDA_RETURN_IF_ERROR(err);
      }
      Rank& rank = c->ranks_[static_cast<size_t>(r)];
      HIQ_ASSIGN_OR_RETURN(rank.ready, cuda::make_event(false));
      HIQ_ASSIGN_OR_RETURN(rank.done, cuda::make_event(false));
    }
    return Result<std::unique_ptr<Collective>>(std::move(c));
  }

  Status reduce(int r, bf16* partial, size_t elements, cudaStream_t stream, TpRendezvous& pass) override {
    Rank& rank = ranks_[static_cast<size_t>(r)];
    rank.partial = partial;
    if (elements * sizeof(bf16) > rank.sum_bytes) {  // on this rank's device: its thread's current one
      rank.sum.reset();
      rank.sum_bytes = 0;
      HIQ_ASSIGN_OR_RETURN(rank.sum, cuda::device_alloc(elements * sizeof(bf16), "tensor-parallel sum"));
      rank.sum_bytes = elements * sizeof(bf16);
    }
    HIQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(rank.ready.get(), stream));
    // Every rank's partial is enqueued (its event recorded) once all have met.
    if (!pass.meet()) return failed_precondition("another rank failed");
    Partials partials{};
    for (size_t q = 0; q < ranks_.size(); ++q) {
      HIQ_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, ranks_[q].ready.get(), 0));
      partials.rank[q] = ranks_[q].partial;
    }
    constexpr int kThreads = 256;
    const auto blocks = static_cast<unsigned>(std::min<size_t>((elements + kThreads - 1) / kThreads, 1024));
    auto* sum = static_cast<bf16*>(rank.sum.get());
    sum_partials<<<std::max(blocks, 1u), kThreads, 0, stream>>>(partials, static_cast<int>(ranks_.size()), elements,
                                                                 sum);
    HIQ_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    HIQ_CUDA_RETURN_IF_ERROR(cudaEventRecord(rank.done.get(), stream));
    // Every rank's read of this partial is enqueued once all have met again.
    if (!pass.meet()) return failed_precondition("another rank failed");
    for (size_t q = 0; q < ranks_.size(); ++q)
      if (static_cast<int>(q) != r) HIQ_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, ranks_[q].done.get(), 0));
    return cuda::cuda_status(cudaMemcpyAsync(partial, sum, elements * sizeof(bf16), cudaMemcpyDeviceToDevice, stream),
                             "tensor-parallel sum");
  }

 private:
  struct Rank {
    cuda::Event ready, done;  // its partial written; every partial read by its sum
    const bf16* partial = nullptr;
    cuda::DeviceMemory sum;
    size_t sum_bytes = 0;
  };
  PeerCollective() = default;
  std::vector<Rank> ranks_;
};

// ---- NCCL, loaded at run time -------------------------------------------------

#if HIQ_HAVE_NCCL_HEADER
struct NcclApi {
  ncclResult_t (*comm_init_all)(ncclComm_t*, int, const int*) = nullptr;
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_abort)(ncclComm_t) = nullptr;
  const char* (*error_string)(ncclResult_t) = nullptr;

  Status check(ncclResult_t result, const char* what) const {
    if (result == ncclSuccess) return Status::ok();
    return internal_error(std::string(what) + ": " + error_string(result));
  }
};

template <typename F>
bool bind(void* library, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(library, name));
  return f != nullptr;
}

Result<const NcclApi*> nccl() {
  static const Result<const NcclApi*> api = []() -> Result<const NcclApi*> {
    void* library = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) library = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr)
      return unavailable(std::string("NCCL is not installed (") + dlerror() +
                         "); the peer collective runs without it");
    static NcclApi a;
    if (!bind(library, "ncclCommInitAll", a.comm_init_all) || !bind(library, "ncclAllReduce", a.all_reduce) ||
        !bind(library, "ncclCommDestroy", a.comm_destroy) || !bind(library, "ncclCommAbort", a.comm_abort) ||
        !bind(library, "ncclGetErrorString", a.error_string))
      return unavailable("the NCCL library found lacks a function hiq calls");
    return &a;
  }();
  return api;
}

class NcclCollective final : public Collective {
 public:
  static Result<std::unique_ptr<Collective>> create(const std::vector<int>& devices) {
    HIQ_ASSIGN_OR_RETURN(const NcclApi* api, nccl());
    auto c = std::unique_ptr<NcclCollective>(new NcclCollective(*api, devices));
    HIQ_RETURN_IF_ERROR(c->init());
    return Result<std::unique_ptr<Collective>>(std::move(c));
  }
  ~NcclCollective() override { destroy(); }

  Status reduce(int r, bf16* partial, size_t elements, cudaStream_t stream, TpRendezvous& pass) override {
    if (!pass.meet()) return failed_precondition("another rank failed");
    // Counted before the enqueue: a rank failing from here on may leave the
    // others' sums waiting for it (rank_left).
    pass.count_sum(r);
    // In place; NCCL adds in BF16 along its ring or tree. Never on an
    // aborted communicator (the lock orders enqueues before an abort).
    std::shared_lock lock(enqueue_mu_);
    if (aborted_.load()) return failed_precondition("NCCL was aborted after a rank failed");
    return api_.check(
        api_.all_reduce(partial, partial, elements, ncclBfloat16, ncclSum, comms_[static_cast<size_t>(r)], stream),
        "ncclAllReduce");
  }
  Status usable() const override {
    if (aborted_.load()) return failed_precondition("NCCL was aborted after a rank failed; make the model again");
    return Status::ok();
  }

 private:
  NcclCollective(const NcclApi& api, std::vector<int> devices) : api_(api), devices_(std::move(devices)) {}
  Status init() {
    const cuda::DeviceScope scope;  // NCCL visits every device
    std::vector<ncclComm_t> comms(devices_.size());
    HIQ_RETURN_IF_ERROR(api_.check(
        api_.comm_init_all(comms.data(), static_cast<int>(comms.size()), devices_.data()), "ncclCommInitAll"));
    comms_ = std::move(comms);
    return Status::ok();
  }
  // A rank that leaves after joining sums in this pass (its enqueue failed,
  // or a fault may have stopped its stream) can leave the others' sums
  // waiting for it on the device forever: abort, with no enqueue under way.
  void rank_left(int rank, const TpRendezvous& pass) override {
    if (pass.sums_made(rank) == 0) return;  // it never joined a sum: nothing waits for it
    std::unique_lock lock(enqueue_mu_);     // waits for enqueues under way
    if (aborted_.exchange(true)) return;
    for (ncclComm_t comm : comms_) (void)api_.comm_abort(comm);
  }
  void destroy() {
    if (!aborted_.load())  // an aborted communicator is freed already
      for (ncclComm_t comm : comms_) (void)api_.comm_destroy(comm);
    comms_.clear();
  }

  const NcclApi& api_;
  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
  std::atomic<bool> aborted_{false};  // the communicators are gone: no pass may use them
  std::shared_mutex enqueue_mu_;      // enqueues share it; an abort takes it alone
};
#endif

Result<std::unique_ptr<Collective>> make_collective(TpCollective kind, const std::vector<int>& devices) {
  if (kind == TpCollective::kPeer) return PeerCollective::create(devices);
#if HIQ_HAVE_NCCL_HEADER
  return NcclCollective::create(devices);
#else
  return unavailable("this build has no NCCL header (nccl.h); the peer collective runs without it");
#endif
}

// ---- the model ------------------------------------------------------------------

class CudaTpModelImpl final : public CudaTpModel {
 public:
  static Result<std::unique_ptr<CudaTpModel>> create(const ModelShape& shape, const CpuModelWeights& weights,
                                                     int size, const CudaTpOptions& options) {
    HIQ_RETURN_IF_ERROR(options.validate(size));
    HIQ_RETURN_IF_ERROR(cuda::require_gpu());
    int count = 0;
    HIQ_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
    auto m = std::unique_ptr<CudaTpModelImpl>(new CudaTpModelImpl());
    m->shape_ = shape;
    m->collective_kind_ = options.collective;
    for (int r = 0; r < size; ++r) {
      if (options.device(r) >= count)
        return invalid_argument("tensor-parallel rank " + std::to_string(r) + " is placed on GPU " +
                                std::to_string(options.device(r)) + ", but this machine has " +
                                std::to_string(count));
      m->devices_.push_back(options.device(r));
    }
    // The split's views of `weights` are needed only until each rank's upload.
    HIQ_ASSIGN_OR_RETURN(std::unique_ptr<CpuTpModel> split, CpuTpModel::create(shape, weights, size));
    cuda::DeviceScope device;  // each rank's model is made on its GPU
    HIQ_ASSIGN_OR_RETURN(m->collective_, make_collective(options.collective, m->devices_));
    for (int r = 0; r < size; ++r) {
      HIQ_RETURN_IF_ERROR(device.set(m->devices_[static_cast<size_t>(r)]));
      m->rank_shapes_.push_back(split->shard_shape(r));
      RankReduce reduce{m.get(), r};
      auto model = make_cuda_model(split->shard_shape(r), split->shard_weights(r), options.model, reduce);
      if (!model) return rank_error(r, model.status());
      m->models_.push_back(std::move(*model));
    }
    return Result<std::unique_ptr<CudaTpModel>>(std::move(m));
  }

  Result<ModelOutput> forward(std::span<DeviceKvPool* const> l1, std::span<const ModelSequence> batch,
                              LogitsWanted logits, const BeforeRankAttention& before_attention) override {
    if (l1.size() != models_.size())
      return invalid_argument("tensor parallelism: " + std::to_string(l1.size()) + " L1 pools for " +
                              std::to_string(models_.size()) + " ranks");
    for (size_t r = 0; r < l1.size(); ++r)
      if (l1[r] == nullptr) return invalid_argument("tensor parallelism: rank " + std::to_string(r) + " has no pool");
    HIQ_RETURN_IF_ERROR(collective_->usable());
    TpRendezvous pass(size());
    pass_ = &pass;
    ModelOutput out;
    run_ranks(pass, [&](int r) {
      run_rank(r, *l1[static_cast<size_t>(r)], batch, logits, before_attention, pass, r == 0 ? &out : nullptr);
    });
    pass_ = nullptr;
    HIQ_RETURN_IF_ERROR(pass.first_error());
    return out;
  }

  Status all_reduce(std::span<void* const> buffers, size_t elements) override {
    if (buffers.size() != models_.size())
      return invalid_argument("tensor parallelism: " + std::to_string(buffers.size()) + " buffers for " +
                              std::to_string(models_.size()) + " ranks");
    HIQ_RETURN_IF_ERROR(collective_->usable());
    TpRendezvous pass(size());
    run_ranks(pass, [&](int r) {
      const auto stream = static_cast<cudaStream_t>(models_[static_cast<size_t>(r)]->stream());
      Status status = cuda::cuda_status(cudaSetDevice(devices_[static_cast<size_t>(r)]), "cudaSetDevice");
      if (status.is_ok())
        status = collective_->reduce(r, static_cast<bf16*>(buffers[static_cast<size_t>(r)]), elements, stream, pass);
      if (status.is_ok()) status = cuda::cuda_status(cudaStreamSynchronize(stream), "all-reduce");
      if (!status.is_ok()) leave(r, status, pass);
    });
    return pass.first_error();
  }

  int size() const override { return static_cast<int>(models_.size()); }
  int device(int rank) const override { return devices_[static_cast<size_t>(rank)]; }
  TpCollective collective() const override { return collective_kind_; }
  const ModelShape& shape() const override { return shape_; }
  const ModelShape& rank_shape(int rank) const override { return rank_shapes_[static_cast<size_t>(rank)]; }
  void* stream(int rank) const override { return models_[static_cast<size_t>(rank)]->stream(); }
  size_t weight_bytes() const override {
    size_t bytes = 0;
    for (const auto& m : models_) bytes += m->weight_bytes();
    return bytes;
  }

 private:
  // Rank r's RowParallelReduce: the collective, within the pass under way.
  struct RankReduce {
    CudaTpModelImpl* model;
    int rank;
    Status operator()(void* partial, size_t elements, void* stream) const {
      return model->collective_->reduce(rank, static_cast<bf16*>(partial), elements,
                                        static_cast<cudaStream_t>(stream), *model->pass_);
    }
  };

  CudaTpModelImpl() = default;

 public:
  // Each rank's model goes with its own GPU current (its streams, cuBLAS
  // handles and memory are that device's).
  ~CudaTpModelImpl() override {
    cuda::DeviceScope device;
    for (size_t r = 0; r < models_.size(); ++r) {
      (void)device.set(devices_[r]);
      models_[r].reset();
    }
  }

 private:
  // Runs `rank(r)` for every rank (run_rank_threads) and restores the
  // calling thread's device, which rank 0's run changes.
  void run_ranks(TpRendezvous& pass, const std::function<void(int)>& rank) {
    const cuda::DeviceScope caller;
    run_rank_threads(pass, size(), rank);
  }

  // Rank r's pass failed: the collective undoes what the rank may leave the
  // others waiting for, and the others see it at their next meeting, before
  // enqueuing another sum.
  void leave(int r, const Status& status, TpRendezvous& pass) {
    collective_->rank_left(r, pass);
    pass.leave(rank_error(r, status));
  }

  void run_rank(int r, DeviceKvPool& l1, std::span<const ModelSequence> batch, LogitsWanted logits,
                const BeforeRankAttention& before_attention, TpRendezvous& pass, ModelOutput* out) {
    Status status = cuda::cuda_status(cudaSetDevice(devices_[static_cast<size_t>(r)]), "cudaSetDevice");
    if (status.is_ok()) {
      // A hook's error is the pass's, but the rank keeps meeting the others.
      BeforeLayerAttention hook;
      if (before_attention)
        hook = [&, r](int layer, void* stream) {
          const Status s = before_attention(r, layer, stream);
          if (!s.is_ok()) pass.record(rank_error(r, s));
          return Status::ok();
        };
      auto result = models_[static_cast<size_t>(r)]->forward(l1, batch, r == 0 ? logits : LogitsWanted::kNone, hook);
      if (result && out != nullptr) *out = std::move(*result);
      if (!result) status = result.status();
    }
    if (!status.is_ok()) leave(r, status, pass);
  }

  ModelShape shape_;
  TpCollective collective_kind_ = TpCollective::kNccl;
  std::vector<int> devices_;
  std::vector<ModelShape> rank_shapes_;
  std::unique_ptr<Collective> collective_;  // before the models, which call it: destroyed after them
  std::vector<std::unique_ptr<CudaModel>> models_;
  TpRendezvous* pass_ = nullptr;  // the pass under way
};

}  // namespace

Result<std::unique_ptr<CudaTpModel>> make_cuda_tp_model(const ModelShape& shape, const CpuModelWeights& weights,
                                                        int size, const CudaTpOptions& options) {
  return CudaTpModelImpl::create(shape, weights, size, options);
}

}  // namespace hiq
