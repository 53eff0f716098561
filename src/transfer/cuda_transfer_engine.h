// transfer/cuda_transfer_engine.h — the TransferEngine on a CUDA GPU.
//
// The L1 pool is in GPU memory (make_cuda_device_kv_pool); the engine pins the
// L2 pool's memory for its lifetime (PinnedHostMemory) and moves only encoded
// bytes over PCIe: one kernel per layer gathers L1 rows, encodes them and
// writes the records straight into pinned L2 (backup), or reads records from
// pinned L2, decodes them and scatters them into L1 slots (load). The codec is
// fused into the transfer; there is no staging copy of the KV.
//
// Backups run on one stream, loads on another; each layer of a load records a
// CUDA event, so a compute stream can wait on the device for exactly the layer
// it reads (stream_wait_layer) while later layers are still arriving. The slot
// lists of an operation travel in a staging ring of pinned and device memory
// that is reused only after the operation completes.
//
// Records are byte-identical to the CPU codecs' (docs/formats.md); the GPU
// suite checks it for every codec.
#pragma once

#include <memory>
#include <span>

#include "transfer/transfer_engine.h"

namespace hiq {

class CudaTransferEngine : public TransferEngine {
 public:
  // Makes `stream` (a cudaStream_t of the engine's device) wait, on the device
  // and without blocking the host, until layer `layer` of load `ticket` is in
  // L1. Errors: an unknown ticket or layer, or a load whose layer was never
  // enqueued because the operation failed (the caller recomputes).
  virtual Status stream_wait_layer(Ticket ticket, int layer, void* stream) = 0;

  // The launch shape of the transfer kernels. Each block fills its own
  // multiprocessor; together they never occupy more than
  // TransferEngineOptions::gpu_sms of them.
  struct LaunchShape {
    int backup_blocks = 0;            // one kernel per backup
    int load_blocks = 0;              // per load kernel; `load_streams` of them run at once
    int load_streams = 0;
    int threads_per_block = 0;
  };
  virtual LaunchShape transfer_launch_shape() const = 0;
};

// The CUDA engine. `l1` must be a CUDA pool (make_cuda_device_kv_pool); both
// pools must outlive the engine. Errors: no GPU or no CUDA backend
// (kUnavailable), pools that do not match, rows too large for the kernels'
// shared memory, or L2 memory that cannot be pinned.
Result<std::unique_ptr<CudaTransferEngine>> make_cuda_transfer_engine(DeviceKvPool& l1, HostKvPool& l2,
                                                                      TransferEngineOptions options = {});

// Tensor parallelism, one engine per rank: rank `rank` of `size`, whose L1
// pool (`l1`, on the current GPU) holds that rank's KV heads, over a host
// pool holding every rank's records (tp_host_geometry: rank r's layer l is
// the pool's layer r·L + l). The rank engines share `l2`'s pinning, which
// their owner makes once (PinnedHostMemory::pin of the pool's reserved
// bytes, registered for every GPU) and keeps until they are gone. Errors: as
// above, and an L1 pool of another tp_size or a host pool that is not its
// ranks'. make_cuda_tp_transfer_engine is what serving uses.
Result<std::unique_ptr<CudaTransferEngine>> make_cuda_rank_transfer_engine(DeviceKvPool& l1, HostKvPool& l2,
                                                                           int rank, int size,
                                                                           TransferEngineOptions options = {});

// The engine of a tensor-parallel group: each operation moves every rank's
// records of the same slots, through the ranks' own engines (each on its
// GPU, all over one host pool it pins once). A layer is ready when every
// rank's is; the operation completes when every rank's part has, and fails
// when one does (the cache then recomputes, as after any failed transfer).
// A submission refused on rank 0 queues nothing; one refused on a later rank
// returns a ticket that completes failed once the others' parts are done.
class CudaTpTransferEngine : public TransferEngine {
 public:
  // Makes `stream` (a cudaStream_t of rank `rank`'s GPU) wait, on the device,
  // until layer `layer` of load `ticket` is in that rank's pool.
  virtual Status stream_wait_rank_layer(Ticket ticket, int rank, int layer, void* stream) = 0;
  virtual int ranks() const = 0;
};

// ranks[r] is rank r's CUDA pool on GPU devices[r] (of a tp_size ranks.size()
// geometry); both the pools and `l2` must outlive the engine. Its stats
// count each operation once (ops, tokens, failures) and add the ranks'
// bytes and seconds.
Result<std::unique_ptr<CudaTpTransferEngine>> make_cuda_tp_transfer_engine(std::span<DeviceKvPool* const> ranks,
                                                                           std::span<const int> devices,
                                                                           HostKvPool& l2,
                                                                           TransferEngineOptions options = {});

}  // namespace hiq
