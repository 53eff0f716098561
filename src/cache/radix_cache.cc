#include "cache/radix_cache.h"

#include <algorithm>
#include <map>
#include <queue>
#include <set>
#include <tuple>
#include <unordered_map>

#include "core/check.h"
#include "core/log.h"

namespace hiq {

// Debug builds check every invariant after each change to the tree.
#ifdef NDEBUG
#define HIQ_CACHE_DEBUG_CHECK() \
  do {                          \
  } while (false)
#else
#define HIQ_CACHE_DEBUG_CHECK() HIQ_CHECK_MSG(check_invariants().is_ok(), check_invariants().to_string().c_str())
#endif

std::string_view write_policy_name(WritePolicy policy) {
  switch (policy) {
    case WritePolicy::kWriteThrough: return "write_through";
    case WritePolicy::kWriteThroughSelective: return "write_through_selective";
    case WritePolicy::kWriteBack: return "write_back";
  }
  return "?";
}

Result<WritePolicy> parse_write_policy(std::string_view name) {
  for (WritePolicy p : {WritePolicy::kWriteThrough, WritePolicy::kWriteThroughSelective, WritePolicy::kWriteBack})
    if (write_policy_name(p) == name) return p;
  return invalid_argument("--hicache-write-policy '" + std::string(name) +
                          "' is not one of write_through, write_through_selective, write_back");
}

enum class NodeTransfer : uint8_t { kNone, kBackup, kLoad, kDemote };

struct RadixNode {
  std::vector<TokenId> key;  // the tokens on the edge from the parent: whole pages
  std::vector<SlotId> l1;    // L1 slots of those tokens, or empty
  std::vector<SlotId> l2;    // L2 slots of those tokens, or empty
  NodeTransfer transfer = NodeTransfer::kNone;
  RadixNode* parent = nullptr;
  std::map<std::vector<TokenId>, std::unique_ptr<RadixNode>> children;  // keyed by the child's first page
  int lock_ref = 0;          // locks on this node or a descendant
  uint64_t last_access = 0;  // logical time of the last match or insert
  uint64_t hits = 0;         // matches that reached this node

  size_t size() const { return key.size(); }
  // L1 slots hold this node's KV now (not still arriving from L2).
  bool in_l1() const { return !l1.empty() && transfer != NodeTransfer::kLoad; }
  // L2 slots hold this node's KV now (not still being written).
  bool in_l2() const { return !l2.empty() && transfer != NodeTransfer::kBackup; }
  // Host-only, or host-only and being demoted (its records stay valid).
  bool host_only() const {
    return l1.empty() && !l2.empty() && (transfer == NodeTransfer::kNone || transfer == NodeTransfer::kDemote);
  }
  bool has_l1_child() const {
    return std::any_of(children.begin(), children.end(), [](const auto& c) { return !c.second->l1.empty(); });
  }
};

// ---- CacheLock --------------------------------------------------------------------

CacheLock::CacheLock(CacheLock&& other) noexcept
    : cache_(std::exchange(other.cache_, nullptr)), node_(std::exchange(other.node_, nullptr)) {}

CacheLock& CacheLock::operator=(CacheLock&& other) noexcept {
  if (this != &other) {
    release();
    cache_ = std::exchange(other.cache_, nullptr);
    node_ = std::exchange(other.node_, nullptr);
  }
  return *this;
}

void CacheLock::release() {
  if (node_) cache_->unlock(node_);
  cache_ = nullptr;
  node_ = nullptr;
}

// ---- RadixCache ---------------------------------------------------------------------

RadixCache::RadixCache(DeviceKvPool& l1, HostKvPool* l2, TransferEngine* engine, RadixCacheOptions options)
    : l1_(l1),
      l2_(l2),
      engine_(engine),
      options_(std::move(options)),
      page_size_(static_cast<size_t>(l1.geometry().page_size)),
      root_(std::make_unique<RadixNode>()) {
  HIQ_CHECK_MSG((l2 == nullptr) == (engine == nullptr), "a host tier needs a transfer engine, and only then");
  if (l2 != nullptr && l2->tiered()) {
    HIQ_CHECK_MSG(l2->rungs() <= kMaxHostRungs, "more host rungs than the cache counts");
    DemotionEngineOptions demotion;
    demotion.threads = options_.demotion_threads;
    demotion.before_job = options_.demotion_hook;
    demotion.backend = options_.demotion_backend;
    demoter_ = std::make_unique<DemotionEngine>(*l2, std::move(demotion));
  }
}

RadixCache::~RadixCache() {
  if (engine_) engine_->drain();  // no transfer may touch slots after the tree is gone
  if (demoter_) {
    // Queued demotions would only rewrite records nobody will read: taken
    // back, so that a server stops without running them; started ones end.
    for (const Demotion& d : demotions_) (void)demoter_->cancel(d.ticket);
    demoter_->drain();
  }
}

CacheLock RadixCache::lock(RadixNode* node) {
  HIQ_CHECK(node != nullptr);
  for (RadixNode* n = node; n != nullptr; n = n->parent) ++n->lock_ref;
  return CacheLock(this, node);
}

std::vector<SlotId> RadixCache::l1_slots_to(const RadixNode* node) const {
  std::vector<const RadixNode*> path;
  for (const RadixNode* n = node; n != root_.get(); n = n->parent) path.push_back(n);
  std::vector<SlotId> out;
  for (auto it = path.rbegin(); it != path.rend(); ++it) out.insert(out.end(), (*it)->l1.begin(), (*it)->l1.end());
  return out;
}

void RadixCache::unlock(RadixNode* node) {
  for (RadixNode* n = node; n != nullptr; n = n->parent) {
    HIQ_CHECK_MSG(n->lock_ref > 0, "unbalanced cache lock");
    --n->lock_ref;
  }
}

namespace {

size_t common_prefix(std::span<const TokenId> a, std::span<const TokenId> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

// Calls fn(node) for every node below `root`, parents before their children.
// fn must not change the tree.
template <typename Node, typename Fn>
void for_each_below(Node* root, Fn fn) {
  std::vector<Node*> stack;
  for (auto& [_, child] : root->children) stack.push_back(child.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    fn(n);
    for (auto& [_, child] : n->children) stack.push_back(child.get());
  }
}

std::vector<TokenId> first_page(std::span<const TokenId> tokens, size_t page) {
  return {tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(page)};
}

template <typename T>
std::vector<T> tail(std::vector<T>& v, size_t from) {
  if (v.empty()) return {};
  std::vector<T> out(v.begin() + static_cast<std::ptrdiff_t>(from), v.end());
  v.resize(from);
  return out;
}

}  // namespace

RadixNode* RadixCache::split(RadixNode* node, size_t at) {
  HIQ_CHECK(at > 0 && at < node->size() && at % page_size_ == 0);
  auto head = std::make_unique<RadixNode>();
  RadixNode* parent = node->parent;
  auto& slot_in_parent = parent->children.at(first_page(node->key, page_size_));
  std::unique_ptr<RadixNode> owned = std::move(slot_in_parent);

  head->key.assign(node->key.begin(), node->key.begin() + static_cast<std::ptrdiff_t>(at));
  node->key.erase(node->key.begin(), node->key.begin() + static_cast<std::ptrdiff_t>(at));
  head->l1 = std::move(node->l1);
  node->l1 = tail(head->l1, at);
  head->l2 = std::move(node->l2);
  node->l2 = tail(head->l2, at);
  // Every lock through `node` also passes through `head`.
  head->lock_ref = node->lock_ref;
  head->last_access = node->last_access;
  head->hits = node->hits;
  // A transfer in flight covers both halves: both settle when it completes.
  head->transfer = node->transfer;
  if (node->transfer == NodeTransfer::kDemote) {
    find_demotion(node)->nodes.push_back(head.get());
  } else if (node->transfer != NodeTransfer::kNone) {
    auto entry = std::find_if(inflight_.begin(), inflight_.end(), [&](const auto& e) {
      return std::find(e.second.begin(), e.second.end(), node) != e.second.end();
    });
    HIQ_CHECK_MSG(entry != inflight_.end(), "a node under transfer that no transfer lists");
    entry->second.push_back(head.get());
  }
  head->parent = parent;
  node->parent = head.get();
  RadixNode* result = head.get();
  head->children.emplace(first_page(node->key, page_size_), std::move(owned));
  slot_in_parent = std::move(head);
  return result;
}

CachedPrefix RadixCache::cached_prefix(std::span<const TokenId> tokens) const {
  const size_t n = tokens.size() / page_size_ * page_size_;
  const RadixNode* node = root_.get();
  size_t pos = 0, l1 = 0;
  bool host_part = false;
  while (pos < n) {
    auto it = node->children.find(first_page(tokens.subspan(pos), page_size_));
    if (it == node->children.end()) break;
    const RadixNode* child = it->second.get();
    const size_t common = common_prefix(child->key, tokens.subspan(pos, n - pos)) / page_size_ * page_size_;
    // The same tiers match_prefix would use: L1, then host-only; a node still
    // arriving from L2 ends the match.
    const bool usable = (child->in_l1() && !host_part) || child->host_only();
    if (common == 0 || !usable) break;
    host_part = host_part || child->host_only();
    pos += common;
    if (!host_part) l1 = pos;
    if (common < child->size()) break;
    node = child;
  }
  return {l1, pos - l1};
}

PrefixMatch RadixCache::match_prefix(std::span<const TokenId> tokens) {
  ++stats_.match_calls;
  stats_.match_tokens += tokens.size();
  PrefixMatch m;
  m.l1_node = root_.get();
  const size_t n = tokens.size() / page_size_ * page_size_;
  RadixNode* node = root_.get();
  size_t pos = 0;
  std::vector<RadixNode*> touched;
  while (pos < n) {
    auto it = node->children.find(first_page(tokens.subspan(pos), page_size_));
    if (it == node->children.end()) break;
    RadixNode* child = it->second.get();
    const size_t common = common_prefix(child->key, tokens.subspan(pos, n - pos)) / page_size_ * page_size_;
    if (common == 0) break;
    if (common < child->size()) child = split(child, common);
    if (child->in_l1() && m.host_node == nullptr) {
      m.l1_slots.insert(m.l1_slots.end(), child->l1.begin(), child->l1.end());
      m.l1_node = child;
    } else if (child->host_only()) {
      m.host_tokens += child->size();
      m.host_node = child;
    } else {
      break;  // still arriving from L2: treat the rest as a miss
    }
    touched.push_back(child);
    pos += child->size();
    node = child;
  }
  if (demoter_ && m.host_node != nullptr) {
    uint64_t since = UINT64_MAX;  // the host part's least recent access
    for (const RadixNode* t : touched)
      if (t->host_only()) since = std::min(since, t->last_access);
    record_reuse(since);
  }
  const uint64_t now = tick();
  for (RadixNode* t : touched) {
    t->last_access = now;
    ++t->hits;
  }
  stats_.hit_tokens_l1 += m.l1_slots.size();
  stats_.hit_tokens_l2 += m.host_tokens;
  if (options_.write_policy == WritePolicy::kWriteThroughSelective && !touched.empty()) {
    // A backup makes its room by dropping or demoting host-only nodes that
    // nothing locks, and the path's own host part, which the match returns
    // to be restored, is such a node until the caller locks it: held here
    // while the backups start.
    const CacheLock path = lock(touched.back());
    for (RadixNode* t : touched) maybe_backup(t);
  }
  return m;
}

RadixNode* RadixCache::insert(std::span<const TokenId> tokens, std::span<const SlotId> l1_slots) {
  HIQ_CHECK(l1_slots.size() == tokens.size());
  const size_t n = tokens.size() / page_size_ * page_size_;
  RadixNode* node = root_.get();
  size_t pos = 0;
  const uint64_t now = tick();
  const auto free_duplicate = [&](size_t i) { HIQ_CHECK(l1_.allocator().free(l1_slots.subspan(i, 1)).is_ok()); };
  while (pos < n) {
    const std::span<const TokenId> rest = tokens.subspan(pos, n - pos);
    auto it = node->children.find(first_page(rest, page_size_));
    if (it == node->children.end()) {
      auto leaf = std::make_unique<RadixNode>();
      leaf->key.assign(rest.begin(), rest.end());
      leaf->l1.assign(l1_slots.begin() + static_cast<std::ptrdiff_t>(pos),
                      l1_slots.begin() + static_cast<std::ptrdiff_t>(n));
      leaf->parent = node;
      leaf->last_access = now;
      RadixNode* added = leaf.get();
      node->children.emplace(first_page(rest, page_size_), std::move(leaf));
      l1_tokens_ += added->size();
      stats_.inserted_tokens += added->size();
      maybe_backup(added);
      HIQ_CACHE_DEBUG_CHECK();
      return added;
    }
    RadixNode* child = it->second.get();
    const size_t common = common_prefix(child->key, rest) / page_size_ * page_size_;
    if (common < child->size()) child = split(child, common);
    // A restore still in flight may yet fail and take its L1 slots away:
    // settle it before this request comes to rely on those slots.
    if (child->transfer == NodeTransfer::kLoad) settle_now(child);
    if (!child->l1.empty()) {
      // Already in L1. The caller may pass the tree's own slots
      // for this part (a matched prefix); any other slot is a duplicate.
      for (size_t i = 0; i < child->size(); ++i)
        if (l1_slots[pos + i] != child->l1[i]) free_duplicate(pos + i);
    } else {
      // Host-only: adopt the freshly computed KV as its L1 copy.
      child->l1.assign(l1_slots.begin() + static_cast<std::ptrdiff_t>(pos),
                       l1_slots.begin() + static_cast<std::ptrdiff_t>(pos + child->size()));
      l1_tokens_ += child->size();
    }
    child->last_access = now;
    pos += child->size();
    node = child;
  }
  HIQ_CACHE_DEBUG_CHECK();
  return node;
}

size_t RadixCache::insert_host(std::span<const TokenId> tokens, size_t from, std::span<const SlotId> l2_slots) {
  HIQ_CHECK(l2_ != nullptr && from % page_size_ == 0 && l2_slots.size() % page_size_ == 0 &&
            from + l2_slots.size() <= tokens.size());
  const auto free_slots = [&](size_t begin, size_t end) {  // token positions, from `from`
    if (end > begin) HIQ_CHECK(l2_->free(l2_slots.subspan(begin - from, end - begin)).is_ok());
  };
  const size_t end = from + l2_slots.size();
  const uint64_t now = tick();
  // The path of tokens[0, from), split where it ends inside an edge.
  RadixNode* node = root_.get();
  size_t pos = 0;
  while (pos < from) {
    auto it = node->children.find(first_page(tokens.subspan(pos), page_size_));
    const size_t common = it == node->children.end()
                              ? 0
                              : common_prefix(it->second->key, tokens.subspan(pos, from - pos)) / page_size_ * page_size_;
    if (common == 0 || (common < it->second->size() && common < from - pos)) {
      free_slots(from, end);  // the prefix is no longer cached
      return 0;
    }
    RadixNode* child = it->second.get();
    if (common < child->size()) child = split(child, common);
    pos += child->size();
    node = child;
  }
  size_t taken = 0;
  while (pos < end) {
    const std::span<const TokenId> rest = tokens.subspan(pos, end - pos);
    auto it = node->children.find(first_page(rest, page_size_));
    if (it == node->children.end()) {
      auto leaf = std::make_unique<RadixNode>();
      leaf->key.assign(rest.begin(), rest.end());
      leaf->l2.assign(l2_slots.begin() + static_cast<std::ptrdiff_t>(pos - from), l2_slots.end());
      leaf->parent = node;
      leaf->last_access = now;
      l2_tokens_ += leaf->size();
      taken += leaf->size();
      node->children.emplace(first_page(rest, page_size_), std::move(leaf));
      break;
    }
    RadixNode* child = it->second.get();
    const size_t common = common_prefix(child->key, rest) / page_size_ * page_size_;
    if (common < child->size()) child = split(child, common);
    if (child->l2.empty() && child->transfer == NodeTransfer::kNone) {
      // L1 only: what storage held is its backup.
      child->l2.assign(l2_slots.begin() + static_cast<std::ptrdiff_t>(pos - from),
                       l2_slots.begin() + static_cast<std::ptrdiff_t>(pos - from + child->size()));
      l2_tokens_ += child->size();
      taken += child->size();
    } else {
      free_slots(pos, pos + child->size());
      stats_.host_insert_duplicate_tokens += child->size();
    }
    pos += child->size();
    node = child;
  }
  stats_.host_inserted_tokens += taken;
  HIQ_CACHE_DEBUG_CHECK();
  return taken;
}

void RadixCache::maybe_backup(RadixNode* node) {
  if (!l2_ || !node->l2.empty() || node->transfer != NodeTransfer::kNone || !node->in_l1()) return;
  if (options_.write_policy == WritePolicy::kWriteThrough ||
      (options_.write_policy == WritePolicy::kWriteThroughSelective &&
       node->hits >= static_cast<uint64_t>(options_.write_through_threshold)))
    start_backup(node);
}

void RadixCache::start_backup(RadixNode* node) {
  if (backups_stopped_) return;
  // Without a wait for a demotion under way first, at the last rung if need be; waiting only when neither can.
  const int rung = backup_rung(node->size()), last = l2_->rungs() - 1;
  auto slots = allocate_l2(node->size(), rung, /*may_wait=*/false);
  if (!slots && rung != last) slots = allocate_l2(node->size(), last, /*may_wait=*/false);
  if (!slots) slots = allocate_l2(node->size(), rung);
  if (!slots) {
    stats_.backup_skipped_tokens += node->size();
    return;
  }
  auto ticket = engine_->backup(node->l1, *slots);
  if (!ticket) {  // the engine is saturated: try again at a later write
    HIQ_CHECK(l2_->free(*slots).is_ok());
    stats_.backup_skipped_tokens += node->size();
    return;
  }
  node->l2 = std::move(*slots);
  node->transfer = NodeTransfer::kBackup;
  l2_tokens_ += node->size();
  inflight_.push_back({*ticket, {node}});
}

Result<std::vector<SlotId>> RadixCache::allocate_l1(size_t tokens) {
  if (l1_.allocator().free_count() < tokens) evict_l1(tokens - l1_.allocator().free_count());
  return l1_.allocator().allocate(tokens);
}

int RadixCache::backup_rung(size_t tokens) const {
  if (!demoter_) return 0;
  const uint64_t bytes = uint64_t{tokens} * l2_->token_stride(0);
  const std::optional<uint64_t> band = rung0_band_bytes();
  const bool rung0 = band ? *band >= bytes : l2_->free_bytes() >= bytes;
  return rung0 ? 0 : l2_->rungs() - 1;
}

bool RadixCache::band_settled() const { return 2 * hits_since_farthest_grew_ >= reuse_distances_.size(); }

void RadixCache::record_reuse(uint64_t since) {
  uint64_t distance = 0;
  for_each_below(static_cast<const RadixNode*>(root_.get()), [&](const RadixNode* n) {
    if (!n->l2.empty() && n->last_access >= since) distance += n->size() * l2_->token_stride(0);
  });
  const bool farther = reuse_distances_.empty() ||
                       distance > *std::max_element(reuse_distances_.begin(), reuse_distances_.end());
  hits_since_farthest_grew_ = farther ? 0 : hits_since_farthest_grew_ + 1;
  reuse_distances_.push_back(distance);
  while (reuse_distances_.size() > std::max<size_t>(options_.reuse_window, 1)) reuse_distances_.pop_front();
}

std::optional<uint64_t> RadixCache::rung0_band_bytes() const {
  if (!demoter_ || reuse_distances_.empty()) return std::nullopt;
  const double capacity = static_cast<double>(l2_->reserved_bytes());
  const double r = static_cast<double>(l2_->token_stride(l2_->rungs() - 1)) /
                   static_cast<double>(l2_->token_stride(0));
  // The farthest of k distances seen underestimates the farthest there is:
  // (1 + 1/k) times it is the unbiased estimate were they uniform, so a
  // few hits are not taken for the whole working set.
  const double k = static_cast<double>(reuse_distances_.size());
  const double farthest =
      static_cast<double>(*std::max_element(reuse_distances_.begin(), reuse_distances_.end())) * (1 + 1 / k);
  // band + (capacity - band) / r >= headroom * farthest: the longest band
  // whose lower rungs still reach that far.
  const double longest = (capacity - r * options_.reuse_headroom * farthest) / (1 - r);
  uint64_t band = 0;  // the farthest hit such a band serves at rung 0
  for (uint64_t d : reuse_distances_)
    if (static_cast<double>(d) <= longest) band = std::max(band, d);
  return band;
}

uint64_t RadixCache::band_from(uint64_t reserve) const {
  const std::optional<uint64_t> band = rung0_band_bytes();
  if (!band || *band <= reserve) return kNoBand;
  // Rung-0 bytes of the L2 nodes by access time, the most recent first.
  std::map<uint64_t, uint64_t, std::greater<>> bytes_at;
  for_each_below(static_cast<const RadixNode*>(root_.get()), [&](const RadixNode* n) {
    if (!n->l2.empty()) bytes_at[n->last_access] += n->size() * l2_->token_stride(0);
  });
  uint64_t from = kNoBand, length = reserve;
  for (const auto& [time, bytes] : bytes_at) {
    if (length + bytes > *band) break;
    length += bytes;
    from = time;
  }
  return from;
}

Result<std::vector<SlotId>> RadixCache::allocate_l2(size_t tokens, int rung, bool may_wait) {
  HIQ_CHECK(l2_ != nullptr);
  bool fragmented = false;
  const uint64_t dropped_before = stats_.l2_evicted_tokens;
  while (true) {
    auto slots = l2_->allocate(tokens, rung);
    if (!slots) fragmented |= tokens <= l2_->free_tokens(rung);
    if (slots || !make_l2_room(tokens, rung, may_wait)) {
      if (fragmented) {
        ++stats_.fragmented_allocations;
        stats_.fragmentation_dropped_tokens += stats_.l2_evicted_tokens - dropped_before;
      }
      return slots;
    }
  }
}

bool RadixCache::make_l2_room(size_t tokens, int rung, bool may_wait) {
  const size_t free = l2_->free_tokens(rung);
  // Past the count, the free space may be in runs too short for a token:
  // dropping anything joins some of them.
  const size_t short_by = tokens > free ? tokens - free : page_size_;
  if (demoter_) {
    const int last = l2_->rungs() - 1;
    const uint64_t wanted = uint64_t{short_by} * l2_->token_stride(rung);
    const auto settle_oldest = [&] {
      ++stats_.demotion_waits;
      const uint64_t before = l2_->free_bytes();
      settle_now(demotions_.front().nodes.front());
      return l2_->free_bytes() > before;  // false: it failed
    };
    // Demotions already done give their bytes at no cost.
    if (apply_finished_demotions() > 0) return true;
    // Rung 0's band (a walk of the tree: only when room is still wanted),
    // the allocation itself counted in it when at rung 0.
    const uint64_t band = band_from(rung == 0 ? uint64_t{tokens} * l2_->token_stride(0) : 0);
    // A drop that keeps the band bets that what lies beyond the band's reach
    // is dead. While the farthest hit still grows (a working set growing,
    // whose hits cannot yet be seen as far back as later ones will be) that
    // bet is not made if every token, the new ones included, would fit at
    // the last rung: the band is demoted instead, and nothing is dropped.
    const bool keep_hits =
        band != kNoBand && !band_settled() && l2_->used_tokens() + tokens <= l2_->num_slots();
    const uint64_t demotable_from = keep_hits ? kNoBand : band;
    if (rung == last || !may_wait) {
      // Outside the band (backup_rung), or with no wait allowed: demotion is
      // started but not waited for; the least recently used nodes at the
      // last rung make the room now, unless the demotions under way will
      // free it (then the allocation waits below, or fails if it may not:
      // start_backup tries the last rung, then waits).
      uint64_t pending = demotion_bytes_pending();
      if (pending < wanted) pending += start_demotions(wanted - pending, demotable_from);
      if (apply_finished_demotions() > 0) return true;  // an inline engine is done already
      // Nothing is dropped for room that demotions under way will free.
      if (pending < wanted && !keep_hits && evict_l2_from(short_by, last, band) > 0) return true;
    } else {
      // Outside the band, demote before any drop: a demotion under way, the
      // oldest, is waited for; else more are started; then the last rung's
      // least recently used go.
      if (!demotions_.empty() && settle_oldest()) return true;
      if (start_demotions(wanted, demotable_from) > 0 && settle_oldest()) return true;
      if (!keep_hits && evict_l2_from(short_by, last, band) > 0) return true;
    }
    if (!may_wait) return false;
    // Then the band itself, demoted before any drop. When a demotion fails,
    // fall through to dropping.
    if (!demotions_.empty() && settle_oldest()) return true;
    if (start_demotions(wanted, kNoBand) > 0 && settle_oldest()) return true;
  }
  return evict_l2(short_by) > 0;
}

uint64_t RadixCache::demotion_bytes_pending() const {
  uint64_t bytes = 0;
  for (const Demotion& d : demotions_) bytes += d.frees;
  return bytes;
}

bool RadixCache::demotable(const RadixNode* node) const {
  // A lock on a host-only node means a restore is coming; on an L1 node it
  // keeps the L1 copy, while its L2 copy, unread meanwhile, may change.
  return node != root_.get() && node->in_l2() && node->transfer == NodeTransfer::kNone &&
         (!node->l1.empty() || node->lock_ref == 0) && l2_->rung_of(node->l2.front()) + 1 < l2_->rungs() &&
         !l2_->any_pinned(node->l2);
}

uint64_t RadixCache::start_demotions(uint64_t bytes, uint64_t band_start) {
  // Host-only nodes first, least recently used first; then the L2 copies of
  // nodes still in L1 (read only once L1 lets them go). Nodes accessed at
  // the same tick lie on one path: the deeper, less shared, goes first.
  //
  // An L2 copy whose node is still in L1 is demoted from its records too,
  // rounded a second time, although L1 holds the original. Encoding it
  // from L1 would be a new backup, not a demotion: the demotion engine
  // rewrites records in place on host threads and never reads L1 (device
  // memory on a GPU), and a backup needs its slots first — room a full
  // tier lacks (the reason demotion is in place), or the old copy freed
  // first, leaving the node without a host copy until the backup lands
  // and losing it when the engine refuses one. Where double rounding was
  // common — backups of a tier whose band is too short to keep them —
  // backup_rung() writes the last rung directly from L1 instead.
  struct Candidate {
    bool in_l1;
    uint64_t last_access;
    size_t depth;  // tokens from the root to the node's end
    RadixNode* node;
  };
  std::vector<Candidate> candidates;
  std::vector<std::pair<RadixNode*, size_t>> stack = {{root_.get(), 0}};  // node, tokens above its edge
  while (!stack.empty()) {
    const auto [n, above] = stack.back();
    stack.pop_back();
    const size_t depth = above + (n == root_.get() ? 0 : n->size());
    if (n != root_.get() && demotable(n) && n->last_access < band_start)
      candidates.push_back({!n->l1.empty(), n->last_access, depth, n});
    for (auto& [_, child] : n->children) stack.emplace_back(child.get(), depth);
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.in_l1, a.last_access, b.depth) < std::tie(b.in_l1, b.last_access, a.depth);
  });
  uint64_t planned = 0;
  for (const Candidate& c : candidates) {
    RadixNode* n = c.node;
    if (planned >= bytes) break;
    const int rung = l2_->rung_of(n->l2.front());
    DemotionJob job{n->l2, l2_->demoted_slots(n->l2, rung, rung + 1), rung, rung + 1};
    const uint64_t saves = n->size() * (l2_->token_stride(rung) - l2_->token_stride(rung + 1));
    n->transfer = NodeTransfer::kDemote;
    const Ticket ticket = demoter_->submit(job);
    demotions_.push_back({ticket, {n}, std::move(job), saves});
    planned += saves;
  }
  return planned;
}

void RadixCache::apply_demotion(Ticket ticket, const Status& status) {
  auto it = std::find_if(demotions_.begin(), demotions_.end(), [&](const Demotion& d) { return d.ticket == ticket; });
  if (it == demotions_.end()) return;  // settled already
  const Demotion d = close_demotion(it);
  if (!status.is_ok()) {  // nothing was written: the node stays as it was
    ++stats_.demotion_failures;
    return;
  }
  HIQ_CHECK(l2_->shrink(d.job.from, d.job.to_rung).is_ok());
  std::unordered_map<SlotId, SlotId> moved;
  moved.reserve(d.job.from.size());
  for (size_t i = 0; i < d.job.from.size(); ++i) moved.emplace(d.job.from[i], d.job.to[i]);
  for (RadixNode* n : d.nodes)
    for (SlotId& s : n->l2) s = moved.at(s);
  stats_.demoted_tokens[d.job.to_rung] += d.job.from.size();
}

RadixCache::Demotion RadixCache::close_demotion(std::vector<Demotion>::iterator it) {
  Demotion d = std::move(*it);
  demotions_.erase(it);
  for (RadixNode* n : d.nodes) n->transfer = NodeTransfer::kNone;
  return d;
}

size_t RadixCache::end_demotion(RadixNode* node) {
  // A restore that waited for a queued demotion would wait for every job
  // ahead of it too: under a full tier, demoting ahead queues a batch, and
  // the least recently used nodes it picks are, in a cyclic working set,
  // the next to be hit.
  const auto d = find_demotion(node);
  if (demoter_->cancel(d->ticket)) {
    close_demotion(d);
    ++stats_.demotions_taken_back;
    return 0;
  }
  return settle_now(node);
}

std::vector<RadixCache::Demotion>::iterator RadixCache::find_demotion(const RadixNode* node) {
  const auto it = std::find_if(demotions_.begin(), demotions_.end(), [&](const Demotion& d) {
    return std::find(d.nodes.begin(), d.nodes.end(), node) != d.nodes.end();
  });
  HIQ_CHECK_MSG(it != demotions_.end(), "a node under demotion that no demotion lists");
  return it;
}

uint64_t RadixCache::apply_finished_demotions() {
  const uint64_t before = l2_->free_bytes();
  for (const DemotionCompletion& c : demoter_->poll()) apply_demotion(c.ticket, c.status);
  return l2_->free_bytes() - before;
}

uint64_t RadixCache::settle_demotions() {
  if (demotions_.empty()) return 0;
  demoter_->drain();
  const uint64_t freed = apply_finished_demotions();
  HIQ_CHECK(demotions_.empty());
  HIQ_CACHE_DEBUG_CHECK();
  return freed;
}

void RadixCache::demote_ahead() {
  // One batch at a time: the tree is scanned once a batch, not once a step.
  if (!demotions_.empty()) return;
  const auto low = static_cast<uint64_t>(options_.demotion_watermark * static_cast<double>(l2_->reserved_bytes()));
  const uint64_t free = l2_->free_bytes();
  uint64_t above_last = 0;  // tokens that could go down a rung
  for (int r = 0; r + 1 < l2_->rungs(); ++r) above_last += l2_->used_tokens(r);
  // Outside rung 0's band only; a scan that found nothing is not repeated
  // before the next access.
  if (free < low && above_last > 0 && demote_ahead_idle_at_ != clock_ &&
      start_demotions(2 * low - free, band_from(0)) == 0)
    demote_ahead_idle_at_ = clock_;
}

bool RadixCache::l1_evictable(const RadixNode* node) const {
  return node != root_.get() && node->in_l1() && node->transfer == NodeTransfer::kNone && node->lock_ref == 0 &&
         !node->has_l1_child();
}

void RadixCache::drop(RadixNode* node) {
  while (!node->children.empty()) drop(node->children.begin()->second.get());
  // A host-only node below a dropped L1 one may be mid-demotion: let it end.
  if (node->transfer == NodeTransfer::kDemote) (void)end_demotion(node);
  HIQ_CHECK(node->transfer == NodeTransfer::kNone && node->lock_ref == 0);
  if (!node->l1.empty()) {
    HIQ_CHECK(l1_.allocator().free(node->l1).is_ok());
    l1_tokens_ -= node->size();
    stats_.l1_dropped_tokens += node->size();
  }
  if (!node->l2.empty()) {
    HIQ_CHECK(l2_->free(node->l2).is_ok());
    l2_tokens_ -= node->size();
    stats_.l2_evicted_tokens += node->size();
  }
  RadixNode* parent = node->parent;
  parent->children.erase(first_page(node->key, page_size_));  // destroys `node`
}

size_t RadixCache::reclaimable_l1_tokens() const {
  // A node nothing locks has no locked descendant either (lock_ref counts
  // them), so its whole subtree can go, leaves first, once its transfers settle.
  size_t tokens = 0;
  for_each_below(static_cast<const RadixNode*>(root_.get()), [&](const RadixNode* n) {
    if (n->lock_ref == 0) tokens += n->l1.size();
  });
  return tokens;
}

size_t RadixCache::evict_l1(size_t tokens) {
  size_t freed = evict_l1_settled(tokens);
  while (freed < tokens) {
    // What is left to free is held by transfers in flight (a backup reads the
    // slots it would give up; a restore writes them). Wait for those of
    // unlocked nodes — usually the short backups of just-finished requests —
    // rather than fail an admission that fits once they settle.
    std::vector<RadixNode*> pinned;
    for_each_below(root_.get(), [&](RadixNode* n) {
      if (n->lock_ref == 0 && n->transfer != NodeTransfer::kNone && !n->l1.empty()) pinned.push_back(n);
    });
    if (pinned.empty()) break;
    for (RadixNode* n : pinned) {
      if (n->transfer == NodeTransfer::kNone) continue;  // settled with an earlier node's transfer
      // An L2 copy under demotion: taken back if it has not started.
      const size_t waited = n->transfer == NodeTransfer::kDemote ? end_demotion(n) : settle_now(n);
      if (waited == 0) continue;
      ++stats_.l1_eviction_waits;
      stats_.l1_eviction_wait_tokens += waited;
    }
    freed += evict_l1_settled(tokens - freed);
  }
  return freed;
}

size_t RadixCache::evict_l1_settled(size_t tokens) {
  // Victims are L1 leaves (no child in L1). Freeing one can make its parent a
  // leaf, which then competes with the rest.
  using Entry = std::tuple<uint64_t, uint64_t, RadixNode*>;  // priority, tie-break, node
  const auto priority = [&](const RadixNode* n) {
    return options_.eviction == EvictionPolicy::kLfu ? Entry{n->hits, n->last_access, nullptr}
                                                     : Entry{n->last_access, 0, nullptr};
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  const auto push = [&](RadixNode* n) {
    Entry e = priority(n);
    std::get<2>(e) = n;
    heap.push(e);
  };
  for_each_below(root_.get(), [&](RadixNode* n) {
    if (l1_evictable(n)) push(n);
  });
  size_t freed = 0;
  while (freed < tokens && !heap.empty()) {
    RadixNode* victim = std::get<2>(heap.top());
    heap.pop();
    if (!l1_evictable(victim)) continue;
    RadixNode* parent = victim->parent;
    const size_t size = victim->size();
    if (!victim->in_l2() && l2_ && options_.write_policy == WritePolicy::kWriteBack) {
      // Write-back: the host copy is made now, before the L1 copy goes.
      start_backup(victim);
      if (victim->transfer == NodeTransfer::kBackup) {
        const Ticket ticket = inflight_.back().first;
        const bool ok = engine_->wait(ticket).is_ok();
        std::erase_if(inflight_, [&](const auto& e) { return e.first == ticket; });
        ++stats_.l1_eviction_waits;
        stats_.l1_eviction_wait_tokens += size;
        settle(victim, ok);
        if (ok && backup_listener_) notify_backup(victim);
      }
    }
    if (victim->in_l2()) {
      HIQ_CHECK(l1_.allocator().free(victim->l1).is_ok());
      victim->l1.clear();
      l1_tokens_ -= size;
      stats_.l1_evicted_to_host_tokens += size;
    } else {
      drop(victim);  // with any host-only nodes below it: they would hang off a gap
    }
    freed += size;
    if (l1_evictable(parent)) push(parent);
  }
  HIQ_CACHE_DEBUG_CHECK();
  return freed;
}

size_t RadixCache::evict_l2(size_t tokens) { return evict_l2_from(tokens, 0); }

size_t RadixCache::evict_l2_from(size_t tokens, int min_rung, uint64_t band_start) {
  if (!l2_) return 0;
  using Entry = std::pair<uint64_t, RadixNode*>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  const auto evictable = [&](const RadixNode* n) {
    return n != root_.get() && n->host_only() && n->transfer == NodeTransfer::kNone && n->children.empty() &&
           n->lock_ref == 0 && n->last_access < band_start &&
           (min_rung == 0 || l2_->rung_of(n->l2.front()) >= min_rung);
  };
  for_each_below(root_.get(), [&](RadixNode* n) {
    if (evictable(n)) heap.push({n->last_access, n});
  });
  size_t freed = 0;
  while (freed < tokens && !heap.empty()) {
    RadixNode* victim = heap.top().second;
    heap.pop();
    if (!evictable(victim)) continue;
    RadixNode* parent = victim->parent;
    freed += victim->size();
    if (l2_eviction_listener_) {
      std::vector<TokenId> path_tokens;
      std::vector<SlotId> path_slots;
      append_path(victim, path_tokens, path_slots);
      l2_eviction_listener_(path_tokens, path_slots, path_tokens.size() - victim->size());
    }
    drop(victim);
    if (evictable(parent)) heap.push({parent->last_access, parent});
  }
  HIQ_CACHE_DEBUG_CHECK();
  return freed;
}

Result<LoadBack> RadixCache::load_back(const PrefixMatch& match) {
  if (!l2_) return failed_precondition("load_back: this cache has no host tier");
  if (match.host_node == nullptr || match.host_tokens == 0)
    return failed_precondition("load_back: the match has no host part");
  if (match.host_tokens < options_.load_back_min_tokens)
    return failed_precondition("load_back: " + std::to_string(match.host_tokens) + " host tokens are fewer than " +
                               std::to_string(options_.load_back_min_tokens) + "; recompute them");
  std::vector<RadixNode*> chain;
  size_t total = 0;
  for (RadixNode* n = match.host_node; n != match.l1_node; n = n->parent) {
    if (n == nullptr || !n->host_only()) return failed_precondition("load_back: the match is stale");
    chain.push_back(n);
    total += n->size();
  }
  if (total != match.host_tokens) return failed_precondition("load_back: the match is stale");
  std::reverse(chain.begin(), chain.end());
  // Restore from finished records: a node's demotion is taken back if it has
  // not started, else waited for.
  for (RadixNode* n : chain)
    if (n->transfer == NodeTransfer::kDemote) (void)end_demotion(n);

  // While L1 makes room, the chain and its L1 ancestors must stay: L1
  // eviction may back up a victim (write-back), and making L2 room for that
  // may demote or drop host-only nodes — never these.
  const CacheLock guard = lock(match.host_node);
  HIQ_ASSIGN_OR_RETURN(std::vector<SlotId> slots, allocate_l1(total));
  std::vector<SlotId> sources;
  sources.reserve(total);
  for (RadixNode* n : chain) sources.insert(sources.end(), n->l2.begin(), n->l2.end());
  auto ticket = engine_->load(sources, slots);
  if (!ticket) {
    HIQ_CHECK(l1_.allocator().free(slots).is_ok());
    return ticket.status();
  }
  size_t offset = 0;
  for (RadixNode* n : chain) {
    n->l1.assign(slots.begin() + static_cast<std::ptrdiff_t>(offset),
                 slots.begin() + static_cast<std::ptrdiff_t>(offset + n->size()));
    n->transfer = NodeTransfer::kLoad;
    offset += n->size();
  }
  l1_tokens_ += total;
  inflight_.push_back({*ticket, chain});
  HIQ_CACHE_DEBUG_CHECK();
  return LoadBack{*ticket, std::move(slots), chain.back()};
}

void RadixCache::settle(RadixNode* n, bool ok) {
  const size_t size = n->size();
  if (n->transfer == NodeTransfer::kBackup) {
    if (ok) {
      stats_.backup_tokens += size;
      stats_.backup_rung_tokens[l2_->rung_of(n->l2.front())] += size;
    } else {
      HIQ_CHECK(l2_->free(n->l2).is_ok());
      n->l2.clear();
      l2_tokens_ -= size;
      ++stats_.backup_failures;
    }
  } else if (n->transfer == NodeTransfer::kLoad) {
    if (ok) {
      stats_.load_back_tokens += size;
      stats_.load_back_rung_tokens[l2_->rung_of(n->l2.front())] += size;
    } else {  // back to host-only: the request that wanted it recomputes
      HIQ_CHECK(l1_.allocator().free(n->l1).is_ok());
      n->l1.clear();
      l1_tokens_ -= size;
      ++stats_.load_back_failures;
    }
  }
  n->transfer = NodeTransfer::kNone;
}

void RadixCache::append_node(const RadixNode* node, std::vector<TokenId>& tokens, std::vector<SlotId>& slots) const {
  tokens.insert(tokens.end(), node->key.begin(), node->key.end());
  // Storage holds rung-0 records; a node below rung 0 has none, and one under
  // demotion has records a demotion thread is rewriting in place.
  const bool rung0 =
      node->in_l2() && node->transfer != NodeTransfer::kDemote && l2_->rung_of(node->l2.front()) == 0;
  if (rung0) slots.insert(slots.end(), node->l2.begin(), node->l2.end());
  else slots.insert(slots.end(), node->size(), kNoSlot);
}

void RadixCache::append_path(const RadixNode* node, std::vector<TokenId>& tokens, std::vector<SlotId>& slots) const {
  std::vector<const RadixNode*> path;
  for (const RadixNode* n = node; n != root_.get(); n = n->parent) path.push_back(n);
  for (auto it = path.rbegin(); it != path.rend(); ++it) append_node(*it, tokens, slots);
}

void RadixCache::notify_backup(const RadixNode* node) {
  std::vector<TokenId> tokens;
  std::vector<SlotId> slots;
  append_path(node, tokens, slots);
  // Blocks may run on into descendants already in L2 (write-back backs up a
  // node after its children): hand over every path down through them.
  const auto down = [&](const auto& self, const RadixNode* n) -> void {
    bool deeper = false;
    for (const auto& [page, child] : n->children) {
      if (!child->in_l2()) continue;
      deeper = true;
      append_node(child.get(), tokens, slots);
      self(self, child.get());
      tokens.resize(tokens.size() - child->size());
      slots.resize(slots.size() - child->size());
    }
    if (!deeper) backup_listener_(tokens, slots);
  };
  down(down, node);
}

size_t RadixCache::settle_now(RadixNode* node) {
  if (node->transfer == NodeTransfer::kDemote) {
    const auto d = find_demotion(node);
    const Ticket ticket = d->ticket;
    const size_t tokens = d->job.from.size();
    apply_demotion(ticket, demoter_->wait(ticket));
    return tokens;
  }
  auto entry = std::find_if(inflight_.begin(), inflight_.end(), [&](const auto& e) {
    return std::find(e.second.begin(), e.second.end(), node) != e.second.end();
  });
  HIQ_CHECK_MSG(entry != inflight_.end(), "a node under transfer that no transfer lists");
  const Ticket ticket = entry->first;
  size_t tokens = 0;
  for (const RadixNode* n : entry->second) tokens += n->size();
  // The engine still knows the ticket: only poll_transfers() acknowledges, and
  // it applies what it acknowledges. apply() drops the entry, so the later
  // completion from poll() is ignored.
  apply(Completion{ticket, TransferKind::kLoad, 0, engine_->wait(ticket)});
  return tokens;
}

void RadixCache::apply(const Completion& completion) {
  auto it = std::find_if(inflight_.begin(), inflight_.end(), [&](const auto& e) { return e.first == completion.ticket; });
  if (it == inflight_.end()) return;  // already settled (write-back waits for its own backups)
  if (!completion.status.is_ok() && stats_.backup_failures + stats_.load_back_failures == 0)
    log(LogLevel::kWarning, "cache",
        "a transfer failed (its KV is recomputed; later failures are only counted): " + completion.status.to_string());
  const bool backed_up = completion.status.is_ok() && !it->second.empty() &&
                         it->second.front()->transfer == NodeTransfer::kBackup;
  const std::vector<RadixNode*> nodes = std::move(it->second);
  inflight_.erase(it);
  for (RadixNode* n : nodes) settle(n, completion.status.is_ok());
  // Once every node of the transfer is valid in L2 (a split shares one).
  if (backed_up && backup_listener_)
    for (const RadixNode* n : nodes) notify_backup(n);
  HIQ_CACHE_DEBUG_CHECK();
}

void RadixCache::poll_transfers() {
  if (!engine_) return;
  // Demoting ahead picks among nodes whose backups had completed when the
  // last poll ran, not those this poll happens to find complete: its
  // choices are then independent of timing (the simulator is deterministic).
  if (demoter_) {
    apply_finished_demotions();
    demote_ahead();
  }
  for (const Completion& c : engine_->poll()) apply(c);
}

void RadixCache::drain_transfers() {
  if (!engine_) return;
  engine_->drain();
  for (const Completion& c : engine_->poll()) apply(c);
  settle_demotions();
}

void RadixCache::clear() {
  drain_transfers();
  // Drops every subtree in which nothing is locked.
  std::function<bool(RadixNode*)> prune = [&](RadixNode* n) {
    bool keep = n->lock_ref > 0;
    for (auto it = n->children.begin(); it != n->children.end();) {
      RadixNode* child = (it++)->second.get();  // advance first: prune may erase the child
      keep |= prune(child);
    }
    if (!keep && n != root_.get()) drop(n);
    return keep;
  };
  prune(root_.get());
}

Status RadixCache::check_invariants() const {
  std::set<SlotId> l1_seen, l2_seen;
  size_t l1_count = 0, l2_count = 0;
  std::vector<const RadixNode*> stack = {root_.get()};
  const auto fail = [](const std::string& what) { return internal_error("radix cache invariant: " + what); };
  while (!stack.empty()) {
    const RadixNode* n = stack.back();
    stack.pop_back();
    if (n->lock_ref < 0) return fail("negative lock count");
    if (n != root_.get()) {
      if (n->key.empty() || n->key.size() % page_size_ != 0) return fail("a key that is not whole pages");
      if (!n->l1.empty() && n->l1.size() != n->size()) return fail("L1 slots do not match the key");
      if (!n->l2.empty() && n->l2.size() != n->size()) return fail("L2 slots do not match the key");
      if (n->l1.empty() && n->l2.empty()) return fail("a node with no KV in any tier");
      if (n->transfer == NodeTransfer::kDemote ? n->l2.empty()
                                               : n->transfer != NodeTransfer::kNone && (n->l1.empty() || n->l2.empty()))
        return fail("a transfer without slots on the tiers it moves between");
      if (!n->l2.empty()) {
        const int rung = l2_->rung_of(n->l2.front());
        for (SlotId s : n->l2)
          if (l2_->rung_of(s) != rung) return fail("a node whose L2 slots are of different rungs");
      }
      if (n->lock_ref > n->parent->lock_ref) return fail("a lock that does not reach the root");
      for (SlotId s : n->l1) {
        if (!l1_seen.insert(s).second) return fail("L1 slot " + std::to_string(s) + " owned twice");
        if (!l1_.allocator().is_allocated(s)) return fail("L1 slot " + std::to_string(s) + " owned but free");
      }
      for (SlotId s : n->l2) {
        if (!l2_seen.insert(s).second) return fail("L2 slot " + std::to_string(s) + " owned twice");
        if (!l2_->is_allocated(s)) return fail("L2 slot " + std::to_string(s) + " owned but free");
      }
      l1_count += n->l1.size();
      l2_count += n->l2.size();
    }
    for (const auto& [page, child] : n->children) {
      if (child->parent != n) return fail("a child whose parent pointer is wrong");
      if (page != first_page(child->key, page_size_)) return fail("a child filed under the wrong page");
      if (n != root_.get() && n->l1.empty() && !child->l1.empty()) return fail("L1 KV below a host-only node");
      stack.push_back(child.get());
    }
  }
  if (l1_count != l1_tokens_ || l2_count != l2_tokens_) return fail("token counts out of step with the nodes");
  for (const Demotion& d : demotions_)
    for (const RadixNode* n : d.nodes)
      if (n->transfer != NodeTransfer::kDemote) return fail("a demotion listing a node not being demoted");
  if (l2_ != nullptr) HIQ_RETURN_IF_ERROR(l2_->check_slots());
  return Status::ok();
}

}  // namespace hiq
