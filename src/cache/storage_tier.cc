#include "cache/storage_tier.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>

#include "core/check.h"
#include "storage/storage_value.h"

namespace hiq {

// Blocks per fetch job: a prefetch's blocks are read by several workers at once.
constexpr size_t kFetchChunkBlocks = 4;

Status StorageTierOptions::validate() const {
  if (max_blocks_per_prefetch == 0) return invalid_argument("storage max_blocks_per_prefetch must be positive");
  if (!synchronous && storage.threads < 1) return invalid_argument("storage threads must be at least 1");
  if (!(storage.prefetch_timeout_base_s >= 0) || !(storage.prefetch_timeout_per_ki_token_s >= 0) ||
      !(storage.prefetch_timeout_max_s >= 0))
    return invalid_argument("storage prefetch timeouts cannot be negative");
  return Status::ok();
}

// One unit of storage work, run on a worker and applied by poll().
struct StorageTier::Job {
  enum class Kind : uint8_t { kWrite, kProbe, kFetch };
  Kind kind = Kind::kWrite;
  std::vector<StorageKey> keys;
  // kWrite: the L2 slots of each block's tokens, block after block (pinned).
  // kFetch: where the fetched tokens go (owned by the job until applied);
  // the first `skip` tokens of the first block are not copied (the tree has them).
  std::vector<SlotId> slots;
  size_t skip = 0;
  PrefetchId prefetch = 0;
  size_t chunk = 0;  // kFetch: which of its prefetch's chunks
  // Results.
  Status status;
  size_t hits = 0;  // kProbe: blocks held from the first; kFetch: blocks valid and copied
  uint64_t corrupt = 0, bytes = 0;
};

struct StorageTier::Prefetch {
  std::vector<TokenId> prompt;  // its whole blocks
  size_t from = 0;              // tokens the tree held when it started
  size_t first_block = 0;       // the block `from` falls in
  bool running = true;          // a probe or fetch not yet applied
  bool forgotten = false;       // no request waits for it
  size_t inserted = 0;          // tokens the tree took from it
  // The fetch, in chunks run in parallel: the blocks the probe found, the L2
  // slots of their tokens (owned until applied), each chunk's valid blocks.
  std::vector<StorageKey> keys;
  std::vector<SlotId> slots;
  std::vector<size_t> chunk_hits;
  size_t chunks_left = 0;
  // Prefetches of the same blocks share one fetch: a follower waits for its
  // leader, then looks again.
  StorageKey first_key{};  // the key of `first_block`
  std::vector<PrefetchId> followers;
  size_t fetched_end = 0;  // its fetch put tokens [from, fetched_end) of the prompt into the tree (0: none)
};

Result<std::unique_ptr<StorageTier>> StorageTier::create(RadixCache& cache, HostKvPool& l2,
                                                         std::unique_ptr<StorageBackend> backend,
                                                         StorageFingerprint fingerprint, StorageTierOptions options) {
  HIQ_RETURN_IF_ERROR(options.validate());
  HIQ_RETURN_IF_ERROR(fingerprint.validate());
  const auto block = static_cast<size_t>(fingerprint.block_tokens);
  if (block % cache.page_size() != 0)
    return invalid_argument("storage blocks of " + std::to_string(block) + " tokens are not whole pages of " +
                            std::to_string(cache.page_size()));
  HIQ_ASSIGN_OR_RETURN(const size_t page_bytes, storage_page_bytes(fingerprint));
  if (page_bytes != block * l2.bytes_per_token())
    return invalid_argument("storage fingerprint (" + fingerprint.describe() + ") does not describe this host tier's records");
  if (backend == nullptr) return invalid_argument("storage tier: no backend");
  return std::unique_ptr<StorageTier>(
      new StorageTier(cache, l2, std::move(backend), std::move(fingerprint), std::move(options)));
}

StorageTier::StorageTier(RadixCache& cache, HostKvPool& l2, std::unique_ptr<StorageBackend> backend,
                         StorageFingerprint fingerprint, StorageTierOptions options)
    : cache_(cache), l2_(l2), backend_(std::move(backend)), fingerprint_(std::move(fingerprint)),
      options_(std::move(options)), block_tokens_(static_cast<size_t>(fingerprint_.block_tokens)) {
  if (!options_.synchronous)
    for (int i = 0; i < options_.storage.threads; ++i) workers_.emplace_back([this] { worker(); });
  cache_.set_backup_listener(
      [this](std::span<const TokenId> tokens, std::span<const SlotId> slots) { on_backed_up(tokens, slots); });
}

StorageTier::~StorageTier() {
  cache_.set_backup_listener({});
  closing_ = true;  // probes completing from here on start no fetch
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;  // the workers finish the queue, then leave
  }
  work_ready_.notify_all();
  for (std::thread& t : workers_) t.join();
  // Unpin written slots, settle fetches: nothing may outlive the tier.
  while (in_flight_ > 0) poll();
}

size_t StorageTier::payload_bytes() const { return block_tokens_ * l2_.bytes_per_token(); }

void StorageTier::submit(std::unique_ptr<Job> job) {
  ++in_flight_;
  if (options_.synchronous) {
    run(*job);
    done_.push_back(std::move(job));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(job));
  }
  work_ready_.notify_one();
}

void StorageTier::worker() {
  for (;;) {
    std::unique_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    run(*job);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.push_back(std::move(job));
    }
    work_done_.notify_all();
  }
}

namespace {

// Where the records of a block's token `t` sit in its value's payload:
// layer-major, each layer's K records of the block's tokens, then its V records.
struct PayloadLayout {
  size_t block_tokens, k_bytes, v_bytes;
  size_t offset(int layer, KvPart part, size_t t) const {
    const size_t per_layer = block_tokens * (k_bytes + v_bytes);
    return static_cast<size_t>(layer) * per_layer + (part == KvPart::kK ? 0 : block_tokens * k_bytes) +
           t * (part == KvPart::kK ? k_bytes : v_bytes);
  }
};

}  // namespace

void StorageTier::run(Job& job) {
  const size_t block = block_tokens_;
  const KvGeometry& geometry = l2_.geometry();
  const PayloadLayout layout{block, l2_.layout(KvPart::kK).record_bytes, l2_.layout(KvPart::kV).record_bytes};
  const auto parts = [&](auto&& each) {  // the (layer, part) planes of a record
    for (int layer = 0; layer < geometry.num_layers; ++layer) {
      each(layer, KvPart::kK, layout.k_bytes);
      if (layout.v_bytes > 0) each(layer, KvPart::kV, layout.v_bytes);
    }
  };
  switch (job.kind) {
    case Job::Kind::kProbe: {
      auto hits = backend_->exists(job.keys);
      job.status = hits.status();
      if (hits) job.hits = *hits;
      return;
    }
    case Job::Kind::kWrite: {
      std::vector<std::vector<std::byte>> values;
      std::vector<std::byte> payload(payload_bytes());
      for (size_t b = 0; b < job.keys.size(); ++b) {
        parts([&](int layer, KvPart part, size_t bytes) {
          for (size_t t = 0; t < block; ++t)
            std::memcpy(payload.data() + layout.offset(layer, part, t), l2_.record(layer, part, job.slots[b * block + t]),
                        bytes);
        });
        values.push_back(encode_value(fingerprint_, job.keys[b], payload));
        job.bytes += values.back().size();
      }
      job.status = backend_->set(job.keys, values);
      return;
    }
    case Job::Kind::kFetch: {
      auto values = backend_->get(job.keys);
      job.status = values.status();
      if (!values) return;
      for (size_t b = 0; b < values->size() && b < job.keys.size(); ++b) {
        const std::vector<std::byte>& value = (*values)[b];
        if (value.empty()) break;  // gone since the probe
        job.bytes += value.size();
        auto payload = decode_value(value, fingerprint_, job.keys[b], payload_bytes());
        if (!payload) {
          ++job.corrupt;  // never served: the run of hits ends here
          break;
        }
        const size_t first = b == 0 ? job.skip : 0;
        parts([&](int layer, KvPart part, size_t bytes) {
          for (size_t t = first; t < block; ++t)
            std::memcpy(l2_.record(layer, part, job.slots[b * block + t - job.skip]),
                        payload->data() + layout.offset(layer, part, t), bytes);
        });
        job.hits = b + 1;
      }
      return;
    }
  }
}

StorageTier::PrefetchId StorageTier::start_prefetch(std::span<const TokenId> prompt) {
  const PrefetchId id = next_prefetch_++;
  auto p = std::make_unique<Prefetch>();
  p->prompt.assign(prompt.begin(), prompt.end());
  if (!probe(id, *p)) return 0;
  prefetches_.emplace(id, std::move(p));
  return id;
}

bool StorageTier::probe(PrefetchId id, Prefetch& p) {
  const size_t block = block_tokens_;
  const size_t blocks = p.prompt.size() / block;
  const size_t cached = cache_.cached_prefix(p.prompt).total();
  const size_t first_block = cached / block;
  if (first_block >= blocks || blocks * block - cached < options_.storage.prefetch_threshold_tokens) return false;
  const size_t last_block = std::min(blocks, first_block + options_.max_blocks_per_prefetch);
  p.prompt.resize(last_block * block);
  p.from = cached;
  p.first_block = first_block;
  p.running = true;
  const std::vector<StorageKey> all = storage_keys(fingerprint_, p.prompt);
  p.first_key = all[first_block];
  // Another prompt's prefetch is already fetching from this block: follow it
  // rather than read the same values twice, and look again once it is done.
  if (auto leader = fetching_.find(p.first_key); leader != fetching_.end()) {
    prefetches_.at(leader->second)->followers.push_back(id);
    ++stats_.followed_prefetches;
    return true;
  }
  fetching_.emplace(p.first_key, id);
  auto job = std::make_unique<Job>();
  job->kind = Job::Kind::kProbe;
  job->keys.assign(all.begin() + static_cast<std::ptrdiff_t>(first_block), all.end());
  job->prefetch = id;
  ++stats_.probes;
  submit(std::move(job));
  return true;
}

bool StorageTier::should_wait(PrefetchId id, double arrival, double now) const {
  auto it = prefetches_.find(id);
  if (it == prefetches_.end() || !it->second->running) return false;
  switch (options_.storage.prefetch_policy) {
    case StoragePrefetchPolicy::kBestEffort: return false;
    case StoragePrefetchPolicy::kWaitComplete: return true;
    case StoragePrefetchPolicy::kTimeout:
      return now - arrival < options_.storage.prefetch_timeout_s(it->second->prompt.size() - it->second->from);
  }
  return false;
}

size_t StorageTier::inserted_tokens(PrefetchId id) const {
  auto it = prefetches_.find(id);
  return it == prefetches_.end() ? 0 : it->second->inserted;
}

void StorageTier::forget(PrefetchId id) {
  auto it = prefetches_.find(id);
  if (it == prefetches_.end()) return;
  if (it->second->running) it->second->forgotten = true;
  else prefetches_.erase(it);
}

void StorageTier::poll() {
  for (;;) {
    std::deque<std::unique_ptr<Job>> done;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done.swap(done_);
    }
    if (done.empty()) return;
    for (auto& job : done) {
      --in_flight_;
      apply(*job);  // may submit more work (a fetch after its probe)
    }
  }
}

void StorageTier::wait_for_progress(double seconds) {
  if (in_flight_ == 0) return;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    work_done_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return !done_.empty(); });
  }
  poll();
}

void StorageTier::apply(Job& job) {
  const size_t block = block_tokens_;
  if (job.kind == Job::Kind::kWrite) {
    HIQ_CHECK(l2_.allocator().unpin(job.slots).is_ok());
    if (job.status.is_ok()) {
      stats_.written_blocks += job.keys.size();
      stats_.bytes_written += job.bytes;
    } else {
      ++stats_.write_failures;
      for (const StorageKey& k : job.keys) known_.erase(k);  // a later backup may try again
    }
    return;
  }
  auto it = prefetches_.find(job.prefetch);
  HIQ_CHECK(it != prefetches_.end());
  Prefetch& p = *it->second;
  const auto finish = [&] {
    p.running = false;
    if (auto f = fetching_.find(p.first_key); f != fetching_.end() && f->second == job.prefetch) fetching_.erase(f);
    const std::vector<PrefetchId> followers = std::exchange(p.followers, {});
    const std::vector<TokenId> brought =  // p's prompt up to the end of what its fetch put into the tree
        std::vector<TokenId>(p.prompt.begin(), p.prompt.begin() + static_cast<std::ptrdiff_t>(p.fetched_end));
    if (p.forgotten) prefetches_.erase(it);
    // Its followers look again, with what it brought now in the tree; what of
    // their prompt it brought counts as theirs from storage.
    for (PrefetchId f : followers) {
      auto follower = prefetches_.find(f);
      if (follower == prefetches_.end()) continue;
      Prefetch& q = *follower->second;
      const size_t n = std::min(brought.size(), q.prompt.size());
      const auto common = static_cast<size_t>(
          std::mismatch(brought.begin(), brought.begin() + static_cast<std::ptrdiff_t>(n), q.prompt.begin()).first -
          brought.begin());
      if (common > q.from) q.inserted += common - q.from;
      if (q.forgotten || closing_ || !probe(f, q)) {
        q.running = false;
        if (q.forgotten) prefetches_.erase(follower);
      }
    }
  };
  if (job.kind == Job::Kind::kProbe) {
    if (!job.status.is_ok()) {
      ++stats_.probe_failures;
      return finish();
    }
    stats_.probe_hit_blocks += job.hits;
    if (closing_) return finish();
    const size_t end = (p.first_block + job.hits) * block;
    if (job.hits == 0 || end - p.from < options_.storage.prefetch_threshold_tokens) return finish();
    const size_t tokens = end - p.from;
    SlotAllocator& allocator = l2_.allocator();
    if (allocator.free_count() < tokens) cache_.evict_l2(tokens - allocator.free_count());
    auto slots = allocator.allocate(tokens);
    if (!slots) {
      stats_.skipped_no_l2_room += job.hits;
      return finish();
    }
    // Chunks of a few blocks, so the workers read and copy them side by side.
    p.keys.assign(job.keys.begin(), job.keys.begin() + static_cast<std::ptrdiff_t>(job.hits));
    p.slots = std::move(*slots);
    const size_t chunks = (job.hits + kFetchChunkBlocks - 1) / kFetchChunkBlocks;
    p.chunk_hits.assign(chunks, 0);
    p.chunks_left = chunks;
    const size_t skip = p.from - p.first_block * block;
    for (size_t c = 0; c < chunks; ++c) {
      const size_t b0 = c * kFetchChunkBlocks, b1 = std::min(job.hits, b0 + kFetchChunkBlocks);
      auto fetch = std::make_unique<Job>();
      fetch->kind = Job::Kind::kFetch;
      fetch->keys.assign(p.keys.begin() + static_cast<std::ptrdiff_t>(b0), p.keys.begin() + static_cast<std::ptrdiff_t>(b1));
      const size_t t0 = c == 0 ? 0 : b0 * block - skip, t1 = b1 * block - skip;  // token offsets in p.slots
      fetch->slots.assign(p.slots.begin() + static_cast<std::ptrdiff_t>(t0), p.slots.begin() + static_cast<std::ptrdiff_t>(t1));
      fetch->skip = c == 0 ? skip : 0;
      fetch->prefetch = job.prefetch;
      fetch->chunk = c;
      submit(std::move(fetch));
    }
    return;
  }
  // A chunk of a fetch. Once all are in, the blocks valid from the first on
  // go into the tree, and the slots of the rest back.
  stats_.corrupt_values += job.corrupt;
  stats_.bytes_read += job.bytes;
  if (!job.status.is_ok()) ++stats_.fetch_failures;
  p.chunk_hits[job.chunk] = job.hits;
  if (--p.chunks_left > 0) return;
  size_t hits = 0;
  for (size_t c = 0; c < p.chunk_hits.size(); ++c) {
    hits += p.chunk_hits[c];
    if (p.chunk_hits[c] < std::min(kFetchChunkBlocks, p.keys.size() - c * kFetchChunkBlocks)) break;
  }
  stats_.fetched_blocks += hits;
  const size_t got = hits == 0 ? 0 : (p.first_block + hits) * block - p.from;
  if (got < p.slots.size())
    HIQ_CHECK(l2_.allocator().free(std::span<const SlotId>(p.slots).subspan(got)).is_ok());
  if (got > 0) {
    p.fetched_end = p.from + got;
    for (size_t b = 0; b < hits; ++b) known_.insert(p.keys[b]);
    const size_t taken = cache_.insert_host(std::span<const TokenId>(p.prompt).first(p.from + got), p.from,
                                            std::span<const SlotId>(p.slots).first(got));
    p.inserted += taken;
    stats_.inserted_tokens += taken;
  }
  p.keys.clear();
  p.slots.clear();
  finish();
}

void StorageTier::on_backed_up(std::span<const TokenId> tokens, std::span<const SlotId> l2_slots) {
  const size_t block = block_tokens_;
  const size_t blocks = tokens.size() / block;
  if (blocks == 0) return;
  const std::vector<StorageKey> keys = storage_keys(fingerprint_, tokens.first(blocks * block));
  auto job = std::make_unique<Job>();
  job->kind = Job::Kind::kWrite;
  for (size_t b = 0; b < blocks; ++b) {
    const std::span<const SlotId> slots = l2_slots.subspan(b * block, block);
    if (std::find(slots.begin(), slots.end(), RadixCache::kNoSlot) != slots.end()) continue;
    if (!known_.insert(keys[b]).second) continue;  // written or found already
    job->keys.push_back(keys[b]);
    job->slots.insert(job->slots.end(), slots.begin(), slots.end());
  }
  if (job->keys.empty()) return;
  HIQ_CHECK(l2_.allocator().pin(job->slots).is_ok());
  submit(std::move(job));
}

}  // namespace hiq
