#include "model/cuda/decode_graphs.h"

#include <string>

#include "core/log.h"
#include "cuda/check.cuh"

namespace hiq::cuda {
namespace {

struct GraphDestroy {
  void operator()(cudaGraph_t g) const { (void)cudaGraphDestroy(g); }
};
using Graph = Owned<cudaGraph_t, GraphDestroy>;

// The graph of what `enqueue` puts on `stream`, instantiated.
Result<cudaGraphExec_t> capture_graph(cudaStream_t stream, const std::function<Status()>& enqueue) {
  HIQ_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const Status enqueued = enqueue();
  cudaGraph_t raw = nullptr;
  // Ends the capture whatever happened: the stream must leave capture mode.
  const Status ended = cuda_status(cudaStreamEndCapture(stream, &raw), "cudaStreamEndCapture");
  const Graph graph(raw);
  HIQ_RETURN_IF_ERROR(enqueued);
  HIQ_RETURN_IF_ERROR(ended);
  cudaGraphExec_t exec = nullptr;
  HIQ_CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(&exec, graph.get(), 0));
  return exec;
}

}  // namespace

void DecodeGraphs::bind(std::vector<const void*> addresses) {
  if (addresses == bound_) return;
  drop();
  bound_ = std::move(addresses);
}

DecodeGraphs::State DecodeGraphs::state(Key key) const {
  const auto it = graphs_.find(key);
  if (it == graphs_.end()) return State::kNew;
  return it->second ? State::kCaptured : State::kFailed;
}

Status DecodeGraphs::launch(Key key, cudaStream_t stream) {
  HIQ_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graphs_.at(key).get(), stream));
  ++stats_.replayed;
  return Status::ok();
}

void DecodeGraphs::capture(Key key, cudaStream_t stream, const std::function<Status()>& enqueue) {
  Result<cudaGraphExec_t> exec = capture_graph(stream, enqueue);
  if (exec.is_ok()) {
    graphs_[key] = GraphExec(*exec);
    ++stats_.captured;
    return;
  }
  (void)cudaGetLastError();  // a failed capture leaves its error for the next launch check to find
  graphs_[key] = GraphExec();
  if (stats_.capture_failures++ == 0)
    log(LogLevel::kWarning, "model",
        "capturing a decode step in a CUDA graph failed (its bucket runs kernel by kernel; counted, not logged "
        "again): " +
            exec.status().to_string());
}

void DecodeGraphs::drop() {
  for (const auto& [key, exec] : graphs_) stats_.dropped += exec ? 1 : 0;
  graphs_.clear();
}

CudaGraphStats DecodeGraphs::stats() const {
  CudaGraphStats s = stats_;
  s.held = 0;
  for (const auto& [key, exec] : graphs_) s.held += exec ? 1 : 0;
  return s;
}

}  // namespace hiq::cuda
