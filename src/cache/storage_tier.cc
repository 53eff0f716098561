#include "cache/storage_tier.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "core/check.h"
#include "storage/storage_value.h"

namespace hiq {

// Blocks per fetch: a prefetch's blocks are read by several workers at once.
constexpr size_t kFetchChunkBlocks = 4;

Status StorageTierOptions::validate() const {
  if (max_blocks_per_prefetch == 0) return invalid_argument("storage max_blocks_per_prefetch must be positive");
  if (!synchronous && storage.threads < 1) return invalid_argument("storage threads must be at least 1");
  if (!(storage.prefetch_timeout_base_s >= 0) || !(storage.prefetch_timeout_per_ki_token_s >= 0) ||
      !(storage.prefetch_timeout_max_s >= 0))
    return invalid_argument("storage prefetch timeouts cannot be negative");
  return Status::ok();
}

// One storage operation the tier submitted, until poll() applies it.
struct StorageTier::Pending {
  enum class Kind : uint8_t { kWrite, kWriteBack, kProbe, kFetch };
  Kind kind = Kind::kWrite;
  std::vector<StorageKey> keys;  // kWrite, kWriteBack: forgotten if they fail; kProbe: what was asked
  // kWrite: the L2 slots the worker reads (pinned). kFetch: where its pages
  // go (owned by the prefetch until applied).
  std::vector<SlotId> slots;
  size_t staged_bytes = 0;  // kWriteBack
  PrefetchId prefetch = 0;  // kProbe, kFetch
  size_t chunk = 0;         // kFetch: which of its prefetch's chunks
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

namespace {

// A block's value payload is its records, layer-major: for each layer the K
// records of the block's tokens, then their V records. `slots` are the
// block's tokens' L2 slots; the first `skip` tokens are not copied.
class PagePlanes {
 public:
  PagePlanes(HostKvPool& l2, size_t block_tokens)
      : l2_(l2), block_(block_tokens), k_(l2.layout(KvPart::kK).record_bytes), v_(l2.layout(KvPart::kV).record_bytes) {}

  void gather(std::span<const SlotId> slots, std::span<std::byte> payload) const {
    each([&](int layer, KvPart part, size_t bytes) {
      for (size_t t = 0; t < block_; ++t)
        std::memcpy(payload.data() + offset(layer, part, t), l2_.record(layer, part, slots[t]), bytes);
    });
  }
  void scatter(std::span<const std::byte> payload, std::span<const SlotId> slots, size_t skip) const {
    each([&](int layer, KvPart part, size_t bytes) {
      for (size_t t = skip; t < block_; ++t)
        std::memcpy(l2_.record(layer, part, slots[t - skip]), payload.data() + offset(layer, part, t), bytes);
    });
  }

 private:
  template <typename Each>
  void each(Each&& each_plane) const {
    for (int layer = 0; layer < l2_.geometry().num_layers; ++layer) {
      each_plane(layer, KvPart::kK, k_);
      if (v_ > 0) each_plane(layer, KvPart::kV, v_);
    }
  }
  size_t offset(int layer, KvPart part, size_t t) const {
    return static_cast<size_t>(layer) * block_ * (k_ + v_) + (part == KvPart::kK ? t * k_ : block_ * k_ + t * v_);
  }

  HostKvPool& l2_;
  size_t block_, k_, v_;
};

}  // namespace

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
    : cache_(cache), l2_(l2), fingerprint_(std::move(fingerprint)), options_(std::move(options)),
      block_tokens_(static_cast<size_t>(fingerprint_.block_tokens)),
      max_remembered_(options_.remembered_blocks > 0
                          ? options_.remembered_blocks
                          : std::max<size_t>(4096, 4 * l2.capacity_tokens() / block_tokens_)),
      engine_(std::make_unique<StorageEngine>(std::move(backend), options_.synchronous ? 0 : options_.storage.threads)) {
  if (cache_.options().write_policy == WritePolicy::kWriteBack)
    cache_.set_l2_eviction_listener([this](std::span<const TokenId> tokens, std::span<const SlotId> slots,
                                           size_t from) { on_l2_evicted(tokens, slots, from); });
  else
    cache_.set_backup_listener(
        [this](std::span<const TokenId> tokens, std::span<const SlotId> slots) { on_backed_up(tokens, slots); });
}

StorageTier::~StorageTier() {
  cache_.set_backup_listener({});
  cache_.set_l2_eviction_listener({});
  closing_ = true;  // probes completing from here on start no fetch
  // Finish what was submitted (writes reach storage), then unpin written
  // slots and settle fetches: nothing may outlive the tier.
  while (!pending_.empty()) {
    engine_->drain();
    poll();
  }
}

size_t StorageTier::payload_bytes() const { return block_tokens_ * l2_.bytes_per_token(); }

StorageTierStats StorageTier::stats() const {
  StorageTierStats s = stats_;
  s.io = engine_->stats();
  return s;
}

bool StorageTier::remembered(const StorageKey& key) { return remembered_.touch(key) != nullptr; }

void StorageTier::remember(const StorageKey& key) {
  remembered_.put(key, 1, 0);
  while (remembered_.size() > max_remembered_) remembered_.pop_oldest();
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
  Pending ask;
  ask.kind = Pending::Kind::kProbe;
  ask.keys.assign(all.begin() + static_cast<std::ptrdiff_t>(first_block), all.end());
  ask.prefetch = id;
  ++stats_.probes;
  const StorageEngine::Ticket ticket = engine_->submit_exists(ask.keys);
  pending_.emplace(ticket, std::move(ask));
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
    const std::vector<StorageEngine::Completion> done = engine_->poll();
    if (done.empty()) return;
    for (const StorageEngine::Completion& c : done) apply(c);  // may submit more (a fetch after its probe)
  }
}

void StorageTier::wait_for_progress(double seconds) {
  if (pending_.empty()) return;
  engine_->wait_for_completion(seconds);
  poll();
}

void StorageTier::apply(const StorageEngine::Completion& completion) {
  auto node = pending_.extract(completion.ticket);
  HIQ_CHECK_MSG(!node.empty(), "a storage completion the tier did not submit");
  Pending& job = node.mapped();
  const bool ok = completion.status.is_ok();
  switch (job.kind) {
    case Pending::Kind::kWrite:
    case Pending::Kind::kWriteBack: {
      if (job.kind == Pending::Kind::kWrite) HIQ_CHECK(l2_.unpin(job.slots).is_ok());
      write_back_staged_ -= job.staged_bytes;
      if (ok) {
        stats_.written_blocks += job.keys.size();
        if (job.kind == Pending::Kind::kWriteBack) stats_.write_back_blocks += job.keys.size();
      } else {
        ++stats_.write_failures;
        for (const StorageKey& k : job.keys) remembered_.erase(k);  // a later backup may try again
      }
      return;
    }
    case Pending::Kind::kProbe: {
      Prefetch& p = *prefetches_.at(job.prefetch);
      if (!ok) {
        ++stats_.probe_failures;
        return finish(job.prefetch);
      }
      stats_.probe_hit_blocks += completion.hits;
      const size_t end = (p.first_block + completion.hits) * block_tokens_;
      if (closing_ || completion.hits == 0 || end - p.from < options_.storage.prefetch_threshold_tokens)
        return finish(job.prefetch);
      job.keys.resize(completion.hits);
      return fetch(job.prefetch, p, std::move(job.keys));
    }
    case Pending::Kind::kFetch: {
      Prefetch& p = *prefetches_.at(job.prefetch);
      if (!ok) ++stats_.fetch_failures;
      // An unusable value was removed: the next backup of its block writes it again.
      for (const StorageKey& k : completion.removed) remembered_.erase(k);
      p.chunk_hits[job.chunk] = ok ? completion.hits : 0;
      if (--p.chunks_left == 0) finish_fetch(job.prefetch, p);
      return;
    }
  }
}

void StorageTier::fetch(PrefetchId id, Prefetch& p, std::vector<StorageKey> keys) {
  const size_t block = block_tokens_;
  const size_t tokens = (p.first_block + keys.size()) * block - p.from;
  auto slots = cache_.allocate_l2(tokens);
  if (!slots) {
    stats_.skipped_no_l2_room += keys.size();
    return finish(id);
  }
  p.keys = std::move(keys);
  p.slots = std::move(*slots);
  // Chunks of a few blocks, so the workers read and copy them side by side.
  // The first block's first `skip` tokens are in the tree already.
  const size_t blocks = p.keys.size(), chunks = (blocks + kFetchChunkBlocks - 1) / kFetchChunkBlocks;
  const size_t skip = p.from - p.first_block * block;
  p.chunk_hits.assign(chunks, 0);
  p.chunks_left = chunks;
  for (size_t c = 0; c < chunks; ++c) {
    const size_t b0 = c * kFetchChunkBlocks, b1 = std::min(blocks, b0 + kFetchChunkBlocks);
    Pending chunk;
    chunk.kind = Pending::Kind::kFetch;
    chunk.prefetch = id;
    chunk.chunk = c;
    const size_t t0 = c == 0 ? 0 : b0 * block - skip, t1 = b1 * block - skip;  // token offsets in p.slots
    chunk.slots.assign(p.slots.begin() + static_cast<std::ptrdiff_t>(t0), p.slots.begin() + static_cast<std::ptrdiff_t>(t1));
    std::vector<StorageKey> chunk_keys(p.keys.begin() + static_cast<std::ptrdiff_t>(b0),
                                       p.keys.begin() + static_cast<std::ptrdiff_t>(b1));
    // The sink runs on a worker: it owns what it reads (the slots it fills
    // belong to the prefetch until this chunk is applied).
    StorageEngine::PageSink sink = [planes = PagePlanes(l2_, block), slots = chunk.slots, block,
                                    first_skip = c == 0 ? skip : 0](size_t b, std::span<const std::byte> payload) {
      const size_t skip_here = b == 0 ? first_skip : 0;
      const size_t at = b == 0 ? 0 : b * block - first_skip;
      planes.scatter(payload, std::span<const SlotId>(slots).subspan(at, block - skip_here), skip_here);
    };
    const StorageEngine::Ticket ticket =
        engine_->submit_get(std::move(chunk_keys), fingerprint_, payload_bytes(), std::move(sink));
    pending_.emplace(ticket, std::move(chunk));
  }
}

void StorageTier::finish_fetch(PrefetchId id, Prefetch& p) {
  // The blocks valid from the first on go into the tree, the slots of the rest back.
  size_t hits = 0;
  for (size_t c = 0; c < p.chunk_hits.size(); ++c) {
    hits += p.chunk_hits[c];
    if (p.chunk_hits[c] < std::min(kFetchChunkBlocks, p.keys.size() - c * kFetchChunkBlocks)) break;
  }
  stats_.fetched_blocks += hits;
  const size_t got = hits == 0 ? 0 : (p.first_block + hits) * block_tokens_ - p.from;
  if (got < p.slots.size())
    HIQ_CHECK(l2_.free(std::span<const SlotId>(p.slots).subspan(got)).is_ok());
  if (got > 0) {
    p.fetched_end = p.from + got;
    for (size_t b = 0; b < hits; ++b) remember(p.keys[b]);
    const size_t taken = cache_.insert_host(std::span<const TokenId>(p.prompt).first(p.from + got), p.from,
                                            std::span<const SlotId>(p.slots).first(got));
    p.inserted += taken;
    stats_.inserted_tokens += taken;
  }
  p.keys.clear();
  p.slots.clear();
  finish(id);
}

void StorageTier::finish(PrefetchId id) {
  auto it = prefetches_.find(id);
  HIQ_CHECK(it != prefetches_.end());
  Prefetch& p = *it->second;
  p.running = false;
  if (auto f = fetching_.find(p.first_key); f != fetching_.end() && f->second == id) fetching_.erase(f);
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
}

bool StorageTier::worth_writing(const StorageKey& key, std::span<const SlotId> block_slots) {
  if (std::find(block_slots.begin(), block_slots.end(), RadixCache::kNoSlot) != block_slots.end()) return false;
  return !remembered(key);  // written or found lately
}

void StorageTier::on_backed_up(std::span<const TokenId> tokens, std::span<const SlotId> l2_slots) {
  const size_t block = block_tokens_;
  const size_t blocks = tokens.size() / block;
  if (blocks == 0) return;
  const std::vector<StorageKey> keys = storage_keys(fingerprint_, tokens.first(blocks * block));
  Pending write;
  write.kind = Pending::Kind::kWrite;
  for (size_t b = 0; b < blocks; ++b) {
    const std::span<const SlotId> slots = l2_slots.subspan(b * block, block);
    if (!worth_writing(keys[b], slots)) continue;
    remember(keys[b]);
    write.keys.push_back(keys[b]);
    write.slots.insert(write.slots.end(), slots.begin(), slots.end());
  }
  if (write.keys.empty()) return;
  HIQ_CHECK(l2_.pin(write.slots).is_ok());
  // The source runs on a worker, over slots pinned until this write is applied.
  StorageEngine::PageSource source = [planes = PagePlanes(l2_, block), slots = write.slots, block](
                                         size_t b, std::span<std::byte> payload) {
    planes.gather(std::span<const SlotId>(slots).subspan(b * block, block), payload);
  };
  // Another server sharing the storage may have written them: skip_stored.
  const StorageEngine::Ticket ticket =
      engine_->submit_set(write.keys, fingerprint_, payload_bytes(), std::move(source), /*skip_stored=*/true);
  pending_.emplace(ticket, std::move(write));
}

void StorageTier::on_l2_evicted(std::span<const TokenId> tokens, std::span<const SlotId> l2_slots, size_t from) {
  const size_t block = block_tokens_;
  const size_t blocks = tokens.size() / block;
  if (blocks == 0) return;
  const std::vector<StorageKey> keys = storage_keys(fingerprint_, tokens.first(blocks * block));
  const PagePlanes planes(l2_, block);
  Pending write;
  write.kind = Pending::Kind::kWriteBack;
  std::vector<std::vector<std::byte>> values;
  // The blocks that end in the evicted node: those that end above it were
  // written when their own node left L2 (or are still there).
  for (size_t b = from / block; b < blocks; ++b) {
    const std::span<const SlotId> slots = l2_slots.subspan(b * block, block);
    if (!worth_writing(keys[b], slots)) continue;
    const size_t bytes = kStorageHeaderBytes + payload_bytes();
    if (write_back_staged_ + bytes > options_.write_back_staging_bytes) {
      ++stats_.write_back_skipped_blocks;
      continue;
    }
    remember(keys[b]);
    std::vector<std::byte>& value = values.emplace_back(bytes);
    planes.gather(slots, std::span<std::byte>(value).subspan(kStorageHeaderBytes));
    seal_value(value, fingerprint_, keys[b]);
    write.keys.push_back(keys[b]);
    write.staged_bytes += bytes;
    write_back_staged_ += bytes;
  }
  if (write.keys.empty()) return;
  const StorageEngine::Ticket ticket = engine_->submit_set(write.keys, std::move(values), /*skip_stored=*/true);
  pending_.emplace(ticket, std::move(write));
}

}  // namespace hiq
