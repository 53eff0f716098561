#include "eval/quality.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "cache/radix_cache.h"
#include "codec/numeric.h"

namespace hiq {
namespace {

// Slots taken from an allocator and given back on destruction, unless handed
// over (to the radix cache) first.
class SlotLease {
 public:
  static Result<SlotLease> take(SlotAllocator& allocator, size_t n) {
    HIQ_ASSIGN_OR_RETURN(std::vector<SlotId> ids, allocator.allocate(n));
    return SlotLease(allocator, std::move(ids));
  }
  SlotLease(SlotLease&& other) noexcept : allocator_(other.allocator_), ids_(std::move(other.ids_)) {
    other.ids_.clear();
  }
  SlotLease& operator=(SlotLease&&) = delete;
  ~SlotLease() {
    if (!ids_.empty()) (void)allocator_.free(ids_);
  }
  std::span<const SlotId> ids() const { return ids_; }
  std::vector<SlotId> hand_over() { return std::exchange(ids_, {}); }

 private:
  SlotLease(SlotAllocator& allocator, std::vector<SlotId> ids) : allocator_(allocator), ids_(std::move(ids)) {}
  SlotAllocator& allocator_;
  std::vector<SlotId> ids_;
};

std::vector<SlotId> concat(std::span<const SlotId> a, std::span<const SlotId> b, size_t b_count) {
  std::vector<SlotId> out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.begin() + static_cast<std::ptrdiff_t>(b_count));
  return out;
}

size_t argmax(std::span<const float> logits) {
  return static_cast<size_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// log softmax of one row, in double.
void log_softmax(std::span<const float> logits, std::vector<double>& out) {
  out.resize(logits.size());
  const double top = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - top);
  const double log_sum = top + std::log(sum);
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<double>(logits[i]) - log_sum;
}

// The standard error of the mean of the scores' nll_change, with texts as
// the samples: the reads of one text restore the same prefix and are not
// independent of each other, so they are one cluster. The cluster-robust
// estimate: √(G/(G − 1) · Σ_t (S_t − n_t·m)²) / N over G texts, where text t
// has n_t of the N values, summing to S_t, and m is the mean of all. With
// one value a text it is the sample standard deviation over √N. NaN with
// fewer than two texts.
double stderr_over_texts(std::span<const TextScore> scores) {
  std::map<size_t, std::pair<double, size_t>> texts;  // text → sum, count
  double mean = 0;
  for (const TextScore& score : scores) {
    auto& [sum, count] = texts[score.text];
    sum += score.nll_change;
    ++count;
    mean += score.nll_change;
  }
  const size_t clusters = texts.size();
  if (clusters < 2) return std::numeric_limits<double>::quiet_NaN();
  const auto n = static_cast<double>(scores.size());
  mean /= n;
  double squares = 0;
  for (const auto& [_, sum_count] : texts) {
    const double deviation = sum_count.first - static_cast<double>(sum_count.second) * mean;
    squares += deviation * deviation;
  }
  const auto g = static_cast<double>(clusters);
  return std::sqrt(g / (g - 1) * squares) / n;
}

// Sums over texts, turned into a CodecQuality at the end.
struct Accumulator {
  size_t texts = 0;
  uint64_t restored_tokens = 0, restored_bytes = 0;
  double nll_reference = 0, nll = 0, kl_sum = 0, kl_max = 0;
  uint64_t heldout = 0, agree_heldout = 0, greedy = 0, agree_greedy = 0;
  double k_error2 = 0, k_norm2 = 0, v_error2 = 0, v_norm2 = 0, max_abs_error = 0;

  size_t missed_texts = 0;
  std::vector<uint64_t> restored_rung_tokens;
  std::vector<TextScore> scores;

  CodecQuality result(const QualityTier& tier) const {
    CodecQuality q;
    q.codec = tier.codec;
    q.name = tier.name();
    q.restored_rung_tokens = restored_rung_tokens;
    q.missed_texts = missed_texts;
    q.texts = texts;
    q.valid = restored_tokens > 0;
    q.restored_tokens = restored_tokens;
    q.restored_bytes = restored_bytes;
    q.heldout_positions = heldout;
    q.greedy_positions = greedy;
    if (heldout > 0) {
      q.perplexity_reference = std::exp(nll_reference / static_cast<double>(heldout));
      q.perplexity = std::exp(nll / static_cast<double>(heldout));
      q.perplexity_change = q.perplexity / q.perplexity_reference - 1;
      q.perplexity_change_stderr = (1 + q.perplexity_change) * stderr_over_texts(scores);
      q.kl_mean = kl_sum / static_cast<double>(heldout);
      q.top1_heldout = static_cast<double>(agree_heldout) / static_cast<double>(heldout);
    }
    q.kl_max = kl_max;
    if (greedy > 0) q.top1_greedy = static_cast<double>(agree_greedy) / static_cast<double>(greedy);
    q.k_relative_rms = k_norm2 > 0 ? std::sqrt(k_error2 / k_norm2) : 0;
    q.v_relative_rms = v_norm2 > 0 ? std::sqrt(v_error2 / v_norm2) : 0;
    q.max_abs_error = max_abs_error;
    q.scores = scores;
    return q;
  }
};

// One codec's host tier: its L2 pool, transfer engine and radix cache
// (destroyed in reverse: the cache first).
struct CodecTier {
  QualityTier codec;
  std::unique_ptr<HostKvPool> l2;
  std::unique_ptr<TransferEngine> transfer;
  std::unique_ptr<RadixCache> cache;
  Accumulator sums;
};

// What the reference computed for one text.
struct Reference {
  std::vector<float> continuation_logits;  // [C][vocab]
  std::vector<int32_t> greedy_tokens;       // G tokens after t[P]
  // The argmax at each greedy position in one teacher-forced pass over the
  // reference prefix: the same pass, batch shape included, as the restored
  // run's. (A GPU's matrix products may round a one-token step differently
  // from a G-token pass, and at a near tie that alone flips the argmax.)
  std::vector<size_t> greedy_forced_argmax;
};

// t[0, P] and then all but the last greedy token: the input whose outputs
// are the G greedy positions.
std::vector<int32_t> greedy_input(std::span<const int32_t> text, size_t prefix_len,
                                  const std::vector<int32_t>& greedy) {
  std::vector<int32_t> tokens(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(prefix_len + 1));
  tokens.insert(tokens.end(), greedy.begin(), greedy.end() - 1);
  return tokens;
}

// Adds the error of the restored rows against the original ones.
Status compare_kv(DeviceKvPool& l1, std::span<const SlotId> original, std::span<const SlotId> restored,
                  Accumulator& sums) {
  const KvGeometry& g = l1.geometry();
  std::vector<uint16_t> a, b;
  for (int layer = 0; layer < g.num_layers; ++layer) {
    for (KvPart part : {KvPart::kK, KvPart::kV}) {
      const size_t row = l1.row_elements(part);
      if (row == 0) continue;  // MLA has no V rows
      a.resize(original.size() * row);
      b.resize(restored.size() * row);
      HIQ_RETURN_IF_ERROR(l1.read_rows(layer, part, original, a.data()));
      HIQ_RETURN_IF_ERROR(l1.read_rows(layer, part, restored, b.data()));
      double& error2 = part == KvPart::kK ? sums.k_error2 : sums.v_error2;
      double& norm2 = part == KvPart::kK ? sums.k_norm2 : sums.v_norm2;
      for (size_t i = 0; i < a.size(); ++i) {
        const double x = numeric::bf16_to_float(a[i]), y = numeric::bf16_to_float(b[i]);
        error2 += (y - x) * (y - x);
        norm2 += x * x;
        sums.max_abs_error = std::max(sums.max_abs_error, std::abs(y - x));
      }
    }
  }
  return Status::ok();
}

Status copy_kv(DeviceKvPool& l1, std::span<const SlotId> from, std::span<const SlotId> to) {
  std::vector<uint16_t> rows;
  for (int layer = 0; layer < l1.geometry().num_layers; ++layer) {
    for (KvPart part : {KvPart::kK, KvPart::kV}) {
      const size_t row = l1.row_elements(part);
      if (row == 0) continue;
      rows.resize(from.size() * row);
      HIQ_RETURN_IF_ERROR(l1.read_rows(layer, part, from, rows.data()));
      HIQ_RETURN_IF_ERROR(l1.write_rows(layer, part, to, rows.data()));
    }
  }
  return Status::ok();
}

// A text to score, and which read of which text it is.
struct ScoredRead {
  std::span<const int32_t> tokens;
  size_t text = 0;  // its index in the input
  size_t read = 0;  // 0 for the first read
};

class Evaluator {
 public:
  Evaluator(QualityModel& model, const QualityOptions& options) : model_(model), options_(options) {}

  Status add_tier(const QualityTier& spec) {
    CodecTier tier;
    tier.codec = spec;
    HostKvPoolOptions host;
    host.codec = spec.codec;
    host.demotion = spec.demotion;
    host.record_align = options_.record_align;
    if (options_.lag > 0) {
      host.size_bytes = options_.host_bytes;
    } else {
      host.capacity_tokens = options_.prefix_len;
    }
    HIQ_ASSIGN_OR_RETURN(tier.l2, HostKvPool::create(model_.l1->geometry(), host, model_.l1->num_slots()));
    HIQ_ASSIGN_OR_RETURN(tier.transfer, model_.make_transfer(*tier.l2));
    RadixCacheOptions cache;
    cache.demotion_threads = 0;  // the same demotions every run
    tier.cache = std::make_unique<RadixCache>(*model_.l1, tier.l2.get(), tier.transfer.get(), cache);
    tier.sums.restored_rung_tokens.assign(static_cast<size_t>(tier.l2->rungs()), 0);
    tiers_.push_back(std::move(tier));
    return Status::ok();
  }

  // The workload mode's step: `insert`'s prefix goes into every tier; then
  // each text of `scored` (inserted earlier) has its prefix restored from
  // each tier that still holds it, and is scored.
  Status step(std::span<const int32_t> insert, std::span<const ScoredRead> scored) {
    const size_t P = options_.prefix_len, C = options_.continuation_len, G = options_.greedy_len;
    SlotAllocator& slots = model_.l1->allocator();
    HIQ_ASSIGN_OR_RETURN(SlotLease prefix, SlotLease::take(slots, P));
    HIQ_ASSIGN_OR_RETURN(SlotLease scratch, SlotLease::take(slots, std::max(C, G)));
    HIQ_RETURN_IF_ERROR(model_.forward(insert.first(P), prefix.ids(), 0, false).status());
    for (CodecTier& tier : tiers_) {
      HIQ_ASSIGN_OR_RETURN(SlotLease copy, SlotLease::take(slots, P));
      HIQ_RETURN_IF_ERROR(copy_kv(*model_.l1, prefix.ids(), copy.ids()));
      tier.cache->insert(insert.first(P), copy.hand_over());
      tier.cache->drain_transfers();
      tier.cache->evict_l1(tier.cache->l1_tokens());  // host-only from here on
    }
    for (const ScoredRead& read : scored) {
      const std::span<const int32_t> score = read.tokens;
      // The scored text's prefix again (the forward pass is deterministic:
      // the same KV it had when it was inserted), and its reference.
      HIQ_RETURN_IF_ERROR(model_.forward(score.first(P), prefix.ids(), 0, false).status());
      HIQ_ASSIGN_OR_RETURN(Reference reference, run_reference(score, prefix.ids(), scratch.ids()));
      for (CodecTier& tier : tiers_) {
        if (tier.cache->cached_prefix(score.first(P)).host < P) {
          ++tier.sums.missed_texts;
          continue;
        }
        HIQ_RETURN_IF_ERROR(restore_and_score(tier, read, prefix.ids(), scratch.ids(), reference));
        tier.cache->evict_l1(tier.cache->l1_tokens());
      }
    }
    return Status::ok();
  }

  Status run(const ScoredRead& read) {
    const std::span<const int32_t> text = read.tokens;
    const size_t P = options_.prefix_len, C = options_.continuation_len, G = options_.greedy_len;
    SlotAllocator& slots = model_.l1->allocator();
    HIQ_ASSIGN_OR_RETURN(SlotLease prefix, SlotLease::take(slots, P));
    HIQ_ASSIGN_OR_RETURN(SlotLease scratch, SlotLease::take(slots, std::max(C, G)));
    const std::span<const int32_t> prefix_tokens = text.first(P);
    HIQ_RETURN_IF_ERROR(model_.forward(prefix_tokens, prefix.ids(), 0, false).status());
    HIQ_ASSIGN_OR_RETURN(Reference reference, run_reference(text, prefix.ids(), scratch.ids()));
    for (CodecTier& tier : tiers_) HIQ_RETURN_IF_ERROR(run_tier(tier, read, prefix.ids(), scratch.ids(), reference));
    return Status::ok();
  }

  QualityReport report(size_t texts) const {
    QualityReport r;
    r.texts = texts;
    // (In the workload mode a tier's `texts` are those it scored.)
    for (const CodecTier& tier : tiers_) r.codecs.push_back(tier.sums.result(tier.codec));
    return r;
  }

 private:
  Result<Reference> run_reference(std::span<const int32_t> text, std::span<const SlotId> prefix,
                                  std::span<const SlotId> scratch) {
    const size_t P = options_.prefix_len, C = options_.continuation_len, G = options_.greedy_len;
    Reference ref;
    HIQ_ASSIGN_OR_RETURN(ref.continuation_logits,
                         model_.forward(text.first(P + C), concat(prefix, scratch, C), P, true));
    // Greedy after t[P], one token at a time; each step reads the KV the
    // steps before it wrote.
    std::vector<int32_t> tokens(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(P + 1));
    const std::vector<SlotId> all = concat(prefix, scratch, G);
    for (size_t k = 0; k < G; ++k) {
      HIQ_ASSIGN_OR_RETURN(std::vector<float> logits,
                           model_.forward(tokens, std::span(all).first(tokens.size()), tokens.size() - 1, false));
      const auto next = static_cast<int32_t>(argmax(logits));
      ref.greedy_tokens.push_back(next);
      tokens.push_back(next);
    }
    HIQ_ASSIGN_OR_RETURN(std::vector<float> forced,
                         model_.forward(greedy_input(text, P, ref.greedy_tokens), all, P, true));
    const size_t vocab = static_cast<size_t>(model_.vocab_size);
    for (size_t k = 0; k < G; ++k) ref.greedy_forced_argmax.push_back(argmax(std::span(forced).subspan(k * vocab, vocab)));
    return ref;
  }

  // The prefix through `tier`: into the tree, backed up, evicted from L1,
  // matched as host-only and restored; then the passes of the reference.
  Status run_tier(CodecTier& tier, const ScoredRead& read, std::span<const SlotId> prefix,
                  std::span<const SlotId> scratch, const Reference& ref) {
    const size_t P = options_.prefix_len;
    const std::span<const int32_t> text = read.tokens;
    const std::string name = tier.codec.name();
    RadixCache& cache = *tier.cache;
    HIQ_ASSIGN_OR_RETURN(SlotLease copy, SlotLease::take(model_.l1->allocator(), P));
    HIQ_RETURN_IF_ERROR(copy_kv(*model_.l1, prefix, copy.ids()));
    const std::vector<SlotId> handed = copy.hand_over();
    cache.insert(text.first(P), handed);
    cache.drain_transfers();
    if (cache.l2_tokens() < P)
      return internal_error(name + ": the prefix was not backed up to L2 (" + std::to_string(cache.l2_tokens()) +
                            " of " + std::to_string(P) + " tokens)");
    cache.evict_l1(P);
    HIQ_RETURN_IF_ERROR(restore_and_score(tier, read, prefix, scratch, ref));
    cache.clear();
    if (cache.l1_tokens() != 0 || cache.l2_tokens() != 0)
      return internal_error(name + ": the cache kept " + std::to_string(cache.l1_tokens()) + " L1 and " +
                            std::to_string(cache.l2_tokens()) + " L2 tokens after clear()");
    return Status::ok();
  }

  // Matches the text's prefix, held only in the tier's L2, restores it and
  // runs the passes of the reference on it.
  Status restore_and_score(CodecTier& tier, const ScoredRead& read, std::span<const SlotId> prefix,
                           std::span<const SlotId> scratch, const Reference& ref) {
    const std::span<const int32_t> text = read.tokens;
    const size_t P = options_.prefix_len, C = options_.continuation_len, G = options_.greedy_len;
    const std::string name = tier.codec.name();
    RadixCache& cache = *tier.cache;
    const std::span<const int32_t> prefix_tokens = text.first(P);
    const RadixCacheStats before = cache.stats();
    const PrefixMatch match = cache.match_prefix(prefix_tokens);
    if (!match.l1_slots.empty() || match.host_tokens != P)
      return internal_error(name + ": after eviction the prefix matched " + std::to_string(match.l1_slots.size()) +
                            " L1 and " + std::to_string(match.host_tokens) + " host tokens, not " +
                            std::to_string(P) + " host tokens");
    const uint64_t bytes_before = tier.transfer->stats().load_bytes;
    HIQ_ASSIGN_OR_RETURN(LoadBack restore, cache.load_back(match));
    CacheLock lock = cache.lock(restore.node);  // before anything else changes the tree
    HIQ_RETURN_IF_ERROR(tier.transfer->wait(restore.ticket).with_context(name + " restore"));
    cache.poll_transfers();
    std::vector<uint64_t> rung_tokens(tier.sums.restored_rung_tokens.size());
    for (size_t r = 0; r < rung_tokens.size(); ++r) {
      rung_tokens[r] = cache.stats().load_back_rung_tokens[r] - before.load_back_rung_tokens[r];
      tier.sums.restored_rung_tokens[r] += rung_tokens[r];
    }
    const std::vector<SlotId> restored = restore.l1_slots;
    tier.sums.restored_tokens += restored.size();
    tier.sums.restored_bytes += tier.transfer->stats().load_bytes - bytes_before;

    HIQ_ASSIGN_OR_RETURN(std::vector<float> continuation,
                         model_.forward(text.first(P + C), concat(restored, scratch, C), P, true));
    const double nll_change = score_continuation(text, ref.continuation_logits, continuation, tier.sums);
    tier.sums.scores.push_back({read.text, read.read, nll_change, std::move(rung_tokens)});

    HIQ_ASSIGN_OR_RETURN(std::vector<float> greedy, model_.forward(greedy_input(text, P, ref.greedy_tokens),
                                                                   concat(restored, scratch, G), P, true));
    const size_t vocab = static_cast<size_t>(model_.vocab_size);
    for (size_t k = 0; k < G; ++k)
      tier.sums.agree_greedy += argmax(std::span(greedy).subspan(k * vocab, vocab)) == ref.greedy_forced_argmax[k];
    tier.sums.greedy += G;

    HIQ_RETURN_IF_ERROR(compare_kv(*model_.l1, prefix, restored, tier.sums));
    ++tier.sums.texts;
    return Status::ok();
  }

  // Adds the continuation's figures to `sums`; returns its mean NLL change
  // per token (restored − reference).
  double score_continuation(std::span<const int32_t> text, std::span<const float> reference,
                            std::span<const float> restored, Accumulator& sums) {
    const size_t P = options_.prefix_len, C = options_.continuation_len;
    const size_t vocab = static_cast<size_t>(model_.vocab_size);
    double nll_change = 0;
    for (size_t i = 0; i < C; ++i) {
      const std::span<const float> ref_row = reference.subspan(i * vocab, vocab);
      const std::span<const float> row = restored.subspan(i * vocab, vocab);
      log_softmax(ref_row, ref_log_);
      log_softmax(row, log_);
      const auto target = static_cast<size_t>(text[P + i + 1]);
      sums.nll_reference -= ref_log_[target];
      sums.nll -= log_[target];
      nll_change += ref_log_[target] - log_[target];
      double kl = 0;
      for (size_t v = 0; v < vocab; ++v) kl += std::exp(ref_log_[v]) * (ref_log_[v] - log_[v]);
      kl = std::max(kl, 0.0);  // rounding can make an exact match a hair negative
      sums.kl_sum += kl;
      sums.kl_max = std::max(sums.kl_max, kl);
      sums.agree_heldout += argmax(ref_row) == argmax(row);
      ++sums.heldout;
    }
    return nll_change / static_cast<double>(C);
  }

  QualityModel& model_;
  const QualityOptions& options_;
  std::vector<CodecTier> tiers_;
  std::vector<double> ref_log_, log_;
};

}  // namespace

QualityModel cpu_quality_model(const ModelShape& shape, const CpuModelWeights& weights, DeviceKvPool& l1) {
  QualityModel model;
  model.l1 = &l1;
  model.vocab_size = shape.vocab_size;
  model.forward = [&shape, &weights, &l1](std::span<const int32_t> tokens, std::span<const SlotId> slots,
                                          size_t first_new, bool all_logits) {
    return cpu_forward(shape, weights, l1, tokens, slots, first_new, all_logits);
  };
  model.make_transfer = [&l1](HostKvPool& l2) { return make_cpu_transfer_engine(l1, l2); };
  return model;
}

std::string QualityTier::name() const {
  HostKvPoolOptions o;
  o.codec = codec;
  o.demotion = demotion;
  return host_codec_name(o);
}

Status QualityOptions::validate() const {
  if (prefix_len == 0) return invalid_argument("--prefix-len must be positive");
  if (lag > 0 && host_bytes == 0) return invalid_argument("--lag needs an L2 budget (--hicache-size)");
  if (reads == 0 || (reads > 1 && lag == 0)) return invalid_argument("--reads must be positive, and above 1 only with --lag");
  if (continuation_len == 0) return invalid_argument("--continuation-len must be positive");
  if (greedy_len == 0) return invalid_argument("--greedy-len must be positive");
  if (codecs.empty()) return invalid_argument("--hicache-codec needs at least one codec");
  return Status::ok();
}

size_t quality_l1_slots(const QualityOptions& options) {
  return 2 * options.prefix_len + std::max(options.continuation_len, options.greedy_len);
}

PairedPerplexityChange paired_perplexity_change(const CodecQuality& a, const CodecQuality& b) {
  std::map<std::pair<size_t, size_t>, double> b_scores;
  for (const TextScore& t : b.scores) b_scores.emplace(std::pair(t.text, t.read), t.nll_change);
  // Each read both scored, its nll_change the difference a − b.
  std::vector<TextScore> differences;
  double mean_a = 0, mean_b = 0;
  for (const TextScore& t : a.scores)
    if (auto it = b_scores.find({t.text, t.read}); it != b_scores.end()) {
      differences.push_back({t.text, t.read, t.nll_change - it->second});
      mean_a += t.nll_change;
      mean_b += it->second;
    }
  PairedPerplexityChange out;
  out.pairs = differences.size();
  if (differences.empty()) {
    out.stderr_difference = std::numeric_limits<double>::quiet_NaN();
    return out;
  }
  // Every read scores the same number of tokens, so the mean of the texts'
  // per-token changes is the per-token change of them all.
  mean_a /= static_cast<double>(differences.size());
  mean_b /= static_cast<double>(differences.size());
  out.a = std::exp(mean_a) - 1;
  out.b = std::exp(mean_b) - 1;
  out.difference = out.a - out.b;
  // First order, as each tier's own error: the difference moves with
  // mean_a − mean_b by exp(mean_a), so against an exact tier (all changes 0)
  // this is a's perplexity_change_stderr.
  out.stderr_difference = std::exp(mean_a) * stderr_over_texts(differences);
  return out;
}

Result<QualityReport> evaluate_quality(QualityModel& model, std::span<const std::vector<int32_t>> texts,
                                       const QualityOptions& options,
                                       const std::function<void(size_t, size_t)>& progress) {
  HIQ_RETURN_IF_ERROR(options.validate());
  if (model.l1 == nullptr || !model.forward || !model.make_transfer || model.vocab_size <= 0)
    return invalid_argument("evaluate_quality: the model is incomplete");
  if (model.l1->geometry().page_size != 1)
    return invalid_argument("evaluate_quality needs an L1 of page size 1 (the prefix is restored token by token)");
  if (model.l1->allocator().free_count() < quality_l1_slots(options))
    return invalid_argument("evaluate_quality needs " + std::to_string(quality_l1_slots(options)) +
                            " free L1 slots; the pool has " + std::to_string(model.l1->allocator().free_count()));
  const size_t needed = options.prefix_len + options.continuation_len + 1;
  for (size_t i = 0; i < texts.size(); ++i)
    if (texts[i].size() < needed)
      return invalid_argument("text " + std::to_string(i) + " has " + std::to_string(texts[i].size()) +
                              " tokens; prefix + continuation + 1 = " + std::to_string(needed) + " are needed");
  Evaluator evaluator(model, options);
  for (const QualityTier& tier : options.codecs) HIQ_RETURN_IF_ERROR(evaluator.add_tier(tier));
  if (options.lag > 0) {
    if (texts.size() <= options.lag)
      return invalid_argument("--lag " + std::to_string(options.lag) + " needs more than " +
                              std::to_string(options.lag) + " texts");
    size_t reads = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      std::vector<ScoredRead> scored;
      for (size_t k = 1; k <= options.reads && k * options.lag <= i; ++k)
        scored.push_back({texts[i - k * options.lag], i - k * options.lag, k - 1});
      HIQ_RETURN_IF_ERROR(evaluator.step(texts[i], scored).with_context("step " + std::to_string(i)));
      reads += scored.size();
      if (progress) progress(i + 1, texts.size());
    }
    return evaluator.report(reads);
  }
  for (size_t i = 0; i < texts.size(); ++i) {
    HIQ_RETURN_IF_ERROR(evaluator.run({texts[i], i, 0}).with_context("text " + std::to_string(i)));
    if (progress) progress(i + 1, texts.size());
  }
  return evaluator.report(texts.size());
}

}  // namespace hiq
