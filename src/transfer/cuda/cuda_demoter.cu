// transfer/cuda/cuda_demoter.cu — demotion on the GPU (transfer/cuda_demoter.h).
#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <numeric>
#include <vector>

#include "codec/cuda/row_kernels.h"
#include "cuda/buffers.h"
#include "cuda/check.cuh"
#include "transfer/cuda/rung_shapes.h"
#include "transfer/cuda_demoter.h"

namespace hiq {
namespace {

// What one concurrent job works in.
struct Lane {
  cuda::Stream stream;                // lowest priority: the model's kernels go first
  cuda::DeviceMemory from, rows, to;  // a chunk's old records, BF16 rows, new records
  cuda::DeviceMemory index;           // 0, 1, …, chunk − 1: record and row indices
  cuda::PinnedMemory staging;         // a chunk's new records, before they go into the pool
};

class Demoter final : public CudaDemoter {
 public:
  Demoter(HostKvPool& pool, CudaDemoterOptions options, std::vector<cuda::KernelShape> decode,
          std::vector<cuda::KernelShape> encode)
      : pool_(pool), options_(std::move(options)), decode_(std::move(decode)), encode_(std::move(encode)) {
    const KvGeometry& g = pool_.geometry();
    parts_ = g.rows_per_layer();
    size_t elements = 0;
    for (int p = 0; p < parts_; ++p) {
      rows_offset_[static_cast<size_t>(p)] = elements * static_cast<size_t>(g.num_layers) * options_.chunk_tokens;
      elements += part_elements(p);
    }
    rows_elements_ = elements * static_cast<size_t>(g.num_layers) * options_.chunk_tokens;
  }

  ~Demoter() override {
    cuda::DeviceScope scope(options_.device);  // the lanes' memory and streams are that GPU's
    lanes_.clear();
  }

  Status demote(const DemotionJob& job) override {
    HIQ_RETURN_IF_ERROR(check_demotion_job(pool_, job));
    if (job.from.empty()) return Status::ok();
    cuda::DeviceScope scope(options_.device);
    const std::vector<DemotionRun> runs = demotion_runs(pool_, job);
    size_t done = 0;  // tokens whose new records are in the pool
    Result<std::unique_ptr<Lane>> lane =
        scope.status().is_ok() ? take_lane() : Result<std::unique_ptr<Lane>>(scope.status());
    if (lane.is_ok()) {
      const Status gpu = on_gpu(**lane, job, runs, done);
      if (gpu.is_ok()) {
        give_back(std::move(*lane));
        gpu_jobs_.fetch_add(1, std::memory_order_relaxed);
        return Status::ok();
      }
      // Let the lane's stream finish whatever it queued before the host
      // rewrites records it may still be reading; a lane whose stream
      // reports an error is not used again. A non-sticky error is cleared,
      // or the next launch on this thread would report it again.
      if (cudaStreamSynchronize((*lane)->stream.get()) == cudaSuccess) give_back(std::move(*lane));
      (void)cudaGetLastError();
    }
    // The host finishes the job: the tokens not yet written still have their
    // old records, as each run's new records end before the old ones of the
    // run's tokens not yet written.
    host_jobs_.fetch_add(1, std::memory_order_relaxed);
    const auto rest = static_cast<std::ptrdiff_t>(done);
    const DemotionJob remaining{{job.from.begin() + rest, job.from.end()}, {job.to.begin() + rest, job.to.end()},
                                job.from_rung, job.to_rung};
    thread_local std::vector<std::byte> scratch;
    return demote_records(pool_, remaining, scratch);
  }

  CudaDemoterStats stats() const override {
    return {gpu_jobs_.load(std::memory_order_relaxed), host_jobs_.load(std::memory_order_relaxed)};
  }

 private:
  size_t part_elements(int p) const { return pool_.layout(static_cast<KvPart>(p), 0).shape.elements(); }

  Result<std::unique_ptr<Lane>> take_lane() {
    {
      std::lock_guard lock(mu_);
      if (!lanes_.empty()) {
        std::unique_ptr<Lane> lane = std::move(lanes_.back());
        lanes_.pop_back();
        return Result<std::unique_ptr<Lane>>(std::move(lane));
      }
    }
    auto lane = std::make_unique<Lane>();
    int least = 0, greatest = 0;
    HIQ_CUDA_RETURN_IF_ERROR(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t stream = nullptr;
    HIQ_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, least));
    lane->stream = cuda::Stream(stream);
    const size_t chunk = options_.chunk_tokens;
    size_t from_bytes = 0, to_bytes = 0;
    for (int r = 0; r < pool_.rungs(); ++r) {
      from_bytes = std::max(from_bytes, pool_.token_stride(r));
      if (r > 0) to_bytes = std::max(to_bytes, pool_.token_stride(r));
    }
    HIQ_ASSIGN_OR_RETURN(lane->from, cuda::device_alloc(chunk * from_bytes, "demotion: old records"));
    HIQ_ASSIGN_OR_RETURN(lane->rows, cuda::device_alloc(rows_elements_ * sizeof(uint16_t), "demotion: BF16 rows"));
    HIQ_ASSIGN_OR_RETURN(lane->to, cuda::device_alloc(chunk * to_bytes, "demotion: new records"));
    HIQ_ASSIGN_OR_RETURN(lane->index, cuda::device_alloc(chunk * sizeof(uint32_t), "demotion: indices"));
    HIQ_ASSIGN_OR_RETURN(lane->staging, cuda::pinned_alloc(chunk * to_bytes, "demotion: staging"));
    std::vector<uint32_t> index(chunk);
    std::iota(index.begin(), index.end(), 0u);
    HIQ_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(lane->index.get(), index.data(), chunk * sizeof(uint32_t), cudaMemcpyHostToDevice));
    return Result<std::unique_ptr<Lane>>(std::move(lane));
  }

  void give_back(std::unique_ptr<Lane> lane) {
    std::lock_guard lock(mu_);
    lanes_.push_back(std::move(lane));
  }

  // A chunk of `count` tokens: their records of `rung` in `records`, laid
  // out as the pool lays out tokens (token_stride(rung) each), and their
  // BF16 rows in the lane's buffer.
  cuda::RowBatch batch(std::byte* records, int rung, uint32_t count, const Lane& lane) {
    const KvGeometry& g = pool_.geometry();
    std::byte* const base = pool_.plane(0, KvPart::kK, 0);
    cuda::RowBatch b;
    b.num_parts = parts_;
    for (int p = 0; p < parts_; ++p) {
      const auto part = static_cast<KvPart>(p);
      cuda::PlaneView& v = b.parts[p];
      v.rows = static_cast<uint16_t*>(lane.rows.get()) + rows_offset_[static_cast<size_t>(p)];
      v.rows_layer_stride = options_.chunk_tokens * part_elements(p);
      v.records = records + (pool_.plane(0, part, rung) - base);
      v.records_layer_stride =
          g.num_layers > 1 ? static_cast<size_t>(pool_.plane(1, part, rung) - pool_.plane(0, part, rung)) : 0;
      v.records_slot_stride = pool_.token_stride(rung);
      v.layout = pool_.layout(part, rung);
    }
    b.l1_rows = b.records = static_cast<const uint32_t*>(lane.index.get());
    b.count = count;
    b.first_layer = 0;
    b.num_layers = g.num_layers;
    return b;
  }

  // The job a chunk at a time: its old records to the GPU, re-encoded there,
  // the new ones back to staging and, once the chunk is all there, into the
  // pool. `done` counts the tokens written; on an error the rest have their
  // old records.
  Status on_gpu(Lane& lane, const DemotionJob& job, const std::vector<DemotionRun>& runs, size_t& done) {
    const size_t n = job.from.size(), chunk = options_.chunk_tokens;
    const size_t from_bytes = pool_.token_stride(job.from_rung), to_bytes = pool_.token_stride(job.to_rung);
    const size_t granule = pool_.granule_bytes();
    std::byte* const base = pool_.plane(0, KvPart::kK, 0);
    auto* from = static_cast<std::byte*>(lane.from.get());
    auto* to = static_cast<std::byte*>(lane.to.get());
    auto* staging = static_cast<std::byte*>(lane.staging.get());
    cudaStream_t stream = lane.stream.get();
    const std::vector<DemotionChunk> chunks = demotion_chunks(runs, n, chunk);
    for (size_t index = 0; index < chunks.size(); ++index) {
      const DemotionChunk& c = chunks[index];
      if (options_.before_chunk) HIQ_RETURN_IF_ERROR(options_.before_chunk(index));
      for (const DemotionPiece& p : c.pieces)
        HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(from + (p.begin - c.begin) * from_bytes,
                                                 base + size_t{job.from[p.begin]} * granule,
                                                 (p.end - p.begin) * from_bytes, cudaMemcpyHostToDevice, stream));
      const auto count = static_cast<uint32_t>(c.end - c.begin);
      HIQ_RETURN_IF_ERROR(cuda::launch_rows(cuda::Direction::kDecode, batch(from, job.from_rung, count, lane),
                                            decode_[static_cast<size_t>(job.from_rung)], options_.max_blocks, stream));
      HIQ_RETURN_IF_ERROR(cuda::launch_rows(cuda::Direction::kEncode, batch(to, job.to_rung, count, lane),
                                            encode_[static_cast<size_t>(job.to_rung)], options_.max_blocks, stream));
      HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging, to, count * to_bytes, cudaMemcpyDeviceToHost, stream));
      HIQ_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
      // The chunk's old records are read: its new ones may go over them
      // (records only: a padded token's padding is left as it was, as the
      // host's demotion leaves it).
      const size_t records = pool_.bytes_per_token(job.to_rung);
      for (const DemotionPiece& p : c.pieces)
        for (size_t i = p.begin; i < p.end; ++i)
          std::memcpy(base + size_t{job.to[i]} * granule, staging + (i - c.begin) * to_bytes, records);
      done = c.end;
    }
    return Status::ok();
  }

  HostKvPool& pool_;
  const CudaDemoterOptions options_;
  const std::vector<cuda::KernelShape> decode_, encode_;  // per rung
  int parts_ = 0;
  std::array<size_t, 2> rows_offset_{};  // elements from the rows buffer to each part's
  size_t rows_elements_ = 0;
  std::mutex mu_;
  std::vector<std::unique_ptr<Lane>> lanes_;  // idle
  std::atomic<uint64_t> gpu_jobs_{0}, host_jobs_{0};
};

}  // namespace

Result<std::shared_ptr<CudaDemoter>> make_cuda_demoter(HostKvPool& pool, CudaDemoterOptions options) {
  if (!pool.tiered()) return invalid_argument("GPU demotion needs a tiered host pool");
  if (pool.record_order() != RecordOrder::kTokenMajor) return invalid_argument("GPU demotion: a layer-major pool");
  if (options.chunk_tokens < 1 || options.chunk_tokens > (size_t{1} << 20) || options.max_blocks < 1)
    return invalid_argument("GPU demotion: chunk_tokens must be from 1 to 2^20 and max_blocks positive");
  HIQ_RETURN_IF_ERROR(cuda::require_gpu());
  if (options.device < 0) HIQ_CUDA_RETURN_IF_ERROR(cudaGetDevice(&options.device));
  cuda::DeviceScope scope(options.device);
  HIQ_RETURN_IF_ERROR(scope.status());
  HIQ_ASSIGN_OR_RETURN(RungKernelShapes shapes, rung_kernel_shapes(pool, pool.geometry().rows_per_layer()));
  return std::shared_ptr<CudaDemoter>(
      std::make_shared<Demoter>(pool, std::move(options), std::move(shapes.decode), std::move(shapes.encode)));
}

}  // namespace hiq
