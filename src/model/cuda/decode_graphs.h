// model/cuda/decode_graphs.h (internal to the CUDA model) — the CUDA graphs of
// decode steps, one per (batch bucket, context bucket): every step of a
// bucket launches the same kernels with the same arguments on the same
// addresses (model/cuda_model_options.h), only the contents of the inputs
// buffer differ, so one graph launch replays a whole step.
//
// A graph bakes in every address its kernels touch: the weights, the model's
// scratch buffers, its inputs buffer and the L1 pool's planes. The model
// binds the addresses of the scratch and the pool before each graph step;
// when one has moved (scratch grown by a larger pass, another pool) the
// graphs are destroyed and each bucket is captured again on its next step.
//
// Capture runs in cudaStreamCaptureModeThreadLocal: the transfer engine's
// threads keep calling CUDA meanwhile (Global mode would make their calls
// fail), while a call of ours that cannot be captured fails the capture
// rather than running. A failed capture is counted, logged once and
// remembered: its bucket runs kernel by kernel until the graphs are dropped.
// Restores are never in a graph: a pass with a before_attention hook waits on
// events of that one restore, so it runs kernel by kernel (cuda_model.cu).
#pragma once

#include <cuda_runtime.h>

#include <compare>
#include <functional>
#include <map>
#include <vector>

#include "cuda/buffers.h"
#include "model/cuda_model.h"

namespace hiq::cuda {

class DecodeGraphs {
 public:
  struct Key {
    int batch = 0;    // decode_batch_bucket
    int context = 0;  // decode_context_bucket
    auto operator<=>(const Key&) const = default;
  };
  enum class State {
    kNew,       // no capture yet: run the step kernel by kernel, then capture()
    kCaptured,  // launch()
    kFailed,    // its capture failed: kernel by kernel
  };

  // Destroys the graphs when `addresses` (of everything a graph may touch
  // that can move) differ from those the graphs were captured with.
  void bind(std::vector<const void*> addresses);
  State state(Key key) const;
  Status launch(Key key, cudaStream_t stream);
  // Captures the work `enqueue` puts on `stream` (idle, and not used by
  // another thread meanwhile) as the graph of `key`. Never fails: see above.
  void capture(Key key, cudaStream_t stream, const std::function<Status()>& enqueue);
  // Destroys every graph and forgets failed captures.
  void drop();
  CudaGraphStats stats() const;

 private:
  struct GraphExecDestroy {
    void operator()(cudaGraphExec_t g) const { (void)cudaGraphExecDestroy(g); }
  };
  using GraphExec = Owned<cudaGraphExec_t, GraphExecDestroy>;

  std::map<Key, GraphExec> graphs_;  // a null exec: the capture failed
  std::vector<const void*> bound_;
  CudaGraphStats stats_;
};

}  // namespace hiq::cuda
