#include "transfer/demotion_engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "core/check.h"

namespace hiq {

namespace {
constexpr size_t kChunkTokens = 16;  // tokens read into scratch at a time
}

Status check_demotion_job(const HostKvPool& pool, const DemotionJob& job) {
  if (job.from.size() != job.to.size()) return invalid_argument("demotion: slot lists of different lengths");
  if (job.from_rung < 0 || job.to_rung <= job.from_rung || job.to_rung >= pool.rungs())
    return invalid_argument("demotion: rung " + std::to_string(job.from_rung) + " to rung " +
                            std::to_string(job.to_rung));
  if (pool.record_order() != RecordOrder::kTokenMajor) return invalid_argument("demotion: a layer-major pool");
  return Status::ok();
}

std::vector<DemotionRun> demotion_runs(const HostKvPool& pool, const DemotionJob& job) {
  const size_t from_span = pool.span(job.from_rung), to_span = pool.span(job.to_rung);
  std::vector<DemotionRun> runs;
  for (size_t i = 0; i < job.from.size(); ++i) {
    if (i > 0 && job.from[i] == job.from[i - 1] + from_span && job.to[i] == job.to[i - 1] + to_span)
      ++runs.back().count;
    else
      runs.push_back({i, 1});
  }
  return runs;
}

std::vector<DemotionChunk> demotion_chunks(std::span<const DemotionRun> runs, size_t tokens, size_t chunk_tokens) {
  HIQ_CHECK(chunk_tokens > 0);
  std::vector<DemotionChunk> chunks;
  size_t first_run = 0;
  for (size_t begin = 0; begin < tokens; begin += chunk_tokens) {
    DemotionChunk c{begin, std::min(tokens, begin + chunk_tokens), {}};
    while (first_run < runs.size() && runs[first_run].begin + runs[first_run].count <= begin) ++first_run;
    for (size_t r = first_run; r < runs.size() && runs[r].begin < c.end; ++r)
      c.pieces.push_back({std::max(runs[r].begin, c.begin), std::min(runs[r].begin + runs[r].count, c.end)});
    chunks.push_back(std::move(c));
  }
  return chunks;
}

Status demote_records(HostKvPool& pool, const DemotionJob& job, std::vector<std::byte>& scratch, CodecStats* stats,
                      CodecImpl impl) {
  HIQ_RETURN_IF_ERROR(check_demotion_job(pool, job));
  // A run of slots is one stretch of memory, its tokens token_stride apart.
  const size_t from_bytes = pool.token_stride(job.from_rung), to_bytes = pool.token_stride(job.to_rung);
  const size_t granule = pool.granule_bytes();
  const KvGeometry& g = pool.geometry();
  const int parts = g.rows_per_layer();
  std::byte* const base = pool.plane(0, KvPart::kK, 0);  // slot 0 of any rung starts here
  scratch.resize(std::max(scratch.size(), kChunkTokens * from_bytes));
  // Each chunk is read whole into scratch before its new records go over the old ones.
  for (const DemotionChunk& c : demotion_chunks(demotion_runs(pool, job), job.from.size(), kChunkTokens)) {
    for (const DemotionPiece& piece : c.pieces)
      std::memcpy(scratch.data() + (piece.begin - c.begin) * from_bytes, base + size_t{job.from[piece.begin]} * granule,
                  (piece.end - piece.begin) * from_bytes);
    for (const DemotionPiece& piece : c.pieces)
      for (int layer = 0; layer < g.num_layers; ++layer)
        for (int p = 0; p < parts; ++p) {
          const auto part = static_cast<KvPart>(p);
          const std::byte* src =
              pool.plane(layer, part, job.from_rung) - base + scratch.data() + (piece.begin - c.begin) * from_bytes;
          std::byte* dst = pool.record(layer, part, job.to[piece.begin], job.to_rung);
          transcode_rows(pool.layout(part, job.from_rung), src, from_bytes, pool.layout(part, job.to_rung), dst,
                         to_bytes, piece.end - piece.begin, stats, impl);
        }
  }
  return Status::ok();
}

DemotionEngine::DemotionEngine(HostKvPool& pool, DemotionEngineOptions options)
    : pool_(pool), options_(std::move(options)) {
  HIQ_CHECK(pool.tiered() && options_.threads >= 0);
  for (int i = 0; i < options_.threads; ++i) workers_.emplace_back([this] { work(); });
}

DemotionEngine::~DemotionEngine() {
  drain();
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

Ticket DemotionEngine::submit(DemotionJob job) {
  Job j;
  {
    std::lock_guard lock(mu_);
    j = {next_ticket_++, std::move(job)};
    running_.push_back(j.ticket);
    if (options_.threads > 0) {
      queue_.push_back(std::move(j));
      work_cv_.notify_one();
      return running_.back();
    }
  }
  run(j, inline_scratch_);
  return j.ticket;
}

void DemotionEngine::run(const Job& job, std::vector<std::byte>& scratch) {
  const auto start = std::chrono::steady_clock::now();
  Status status = options_.before_job ? options_.before_job(job.ticket) : Status::ok();
  if (status.is_ok())
    status = options_.backend ? options_.backend(job.job)
                              : demote_records(pool_, job.job, scratch, nullptr, options_.codec_impl);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  {
    std::lock_guard lock(mu_);
    std::erase(running_, job.ticket);
    done_.push_back({job.ticket, job.job.from.size(), status});
    if (!status.is_ok()) {
      ++stats_.failed_jobs;
    } else {
      const uint64_t tokens = job.job.from.size();
      ++stats_.jobs;
      stats_.tokens += tokens;
      stats_.bytes_read += tokens * pool_.bytes_per_token(job.job.from_rung);
      stats_.bytes_written += tokens * pool_.bytes_per_token(job.job.to_rung);
      stats_.seconds += seconds;
    }
  }
  done_cv_.notify_all();
}

void DemotionEngine::work() {
  std::vector<std::byte> scratch;
  while (true) {
    Job job;
    {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    run(job, scratch);
  }
}

std::vector<DemotionCompletion> DemotionEngine::poll() {
  std::lock_guard lock(mu_);
  return std::exchange(done_, {});
}

Status DemotionEngine::wait(Ticket ticket) {
  std::unique_lock lock(mu_);
  const auto done = [&] {
    return std::find_if(done_.begin(), done_.end(), [&](const DemotionCompletion& c) { return c.ticket == ticket; });
  };
  // A ticket neither running nor done is unknown, handed back by poll(), or
  // taken back (cancel) — possibly while this thread waited.
  const auto running = [&] { return std::find(running_.begin(), running_.end(), ticket) != running_.end(); };
  done_cv_.wait(lock, [&] { return done() != done_.end() || !running(); });
  if (done() == done_.end())
    return not_found("demotion ticket " + std::to_string(ticket) + " is unknown, taken back or already handed back");
  return done()->status;
}

bool DemotionEngine::cancel(Ticket ticket) {
  {
    std::lock_guard lock(mu_);
    const auto queued = std::find_if(queue_.begin(), queue_.end(), [&](const Job& j) { return j.ticket == ticket; });
    if (queued == queue_.end()) return false;
    queue_.erase(queued);
    std::erase(running_, ticket);
    ++stats_.cancelled_jobs;
  }
  done_cv_.notify_all();  // drain() waits for running_ to empty
  return true;
}

void DemotionEngine::drain() {
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return running_.empty(); });
}

DemotionStats DemotionEngine::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace hiq
