#include "memory/host_kv_pool.h"

#include <cmath>
#include <limits>
#include <string>

#include "core/check.h"
#include "core/units.h"

namespace hiq {

namespace {

constexpr std::string_view kTiered = "tiered:";

// Each rung below the top has fewer bits per value than the one above it
// (the top's smaller part, for a K/V pair).
Status check_ladder(const HostKvPoolOptions& options) {
  int above = std::min(codec_value_bits(options.codec.k), codec_value_bits(options.codec.v));
  std::string previous = options.codec.name();
  for (CodecKind c : options.demotion) {
    if (codec_value_bits(c) >= above)
      return invalid_argument("'" + host_codec_name(options) + "': each rung of a ladder must have fewer bits per " +
                              "value than the one before (" + std::string(codec_name(c)) + " after " + previous + ")");
    above = codec_value_bits(c);
    previous = codec_name(c);
  }
  return Status::ok();
}

}  // namespace

Status parse_host_codec(std::string_view spec, HostKvPoolOptions& options) {
  if (!spec.starts_with(kTiered)) {
    HIQ_ASSIGN_OR_RETURN(options.codec, parse_kv_codecs(spec));
    options.demotion.clear();
    return Status::ok();
  }
  std::vector<CodecKind> ladder;
  std::string_view rest = spec.substr(kTiered.size());
  while (true) {
    const size_t comma = rest.find(',');
    HIQ_ASSIGN_OR_RETURN(const CodecKind codec, parse_codec(rest.substr(0, comma)));
    ladder.push_back(codec);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  if (ladder.size() < 2)
    return invalid_argument("'" + std::string(spec) + "': a ladder needs two codecs or more, e.g. tiered:int8,int4h");
  HostKvPoolOptions parsed = options;
  parsed.codec = ladder.front();
  parsed.demotion.assign(ladder.begin() + 1, ladder.end());
  HIQ_RETURN_IF_ERROR(check_ladder(parsed));
  options = std::move(parsed);
  return Status::ok();
}

std::string host_codec_name(const HostKvPoolOptions& options) {
  if (options.demotion.empty()) return options.codec.name();
  std::string out = std::string(kTiered) + options.codec.name();
  for (CodecKind c : options.demotion) out += "," + std::string(codec_name(c));
  return out;
}

HostKvPool::HostKvPool(const KvGeometry& geometry, std::vector<Rung> rungs, std::vector<uint32_t> spans,
                       size_t capacity, size_t granules, size_t granule_bytes, RecordOrder order, MappedRegion memory)
    : geometry_(geometry),
      rungs_(std::move(rungs)),
      capacity_tokens_(capacity),
      granule_bytes_(granule_bytes),
      order_(order),
      memory_(std::move(memory)),
      slots_(granules, std::move(spans)) {}

Result<std::vector<size_t>> ladder_token_strides(std::span<const size_t> bytes_per_token) {
  // The granule is a token of the last rung, and a token of any other rung
  // takes whole granules, padded at its end. Every free run is then whole
  // last-rung tokens: the rung where a ladder drops never meets runs too
  // short for a token, whatever tokens of other rungs came and went. (The
  // greatest common divisor of the rungs' bytes would waste no padding, but
  // the holes left between tokens of different spans would hold none:
  // capacity lost exactly where the ladder runs out of it.)
  HIQ_CHECK(!bytes_per_token.empty() && bytes_per_token.back() > 0);
  const size_t granule = bytes_per_token.back();
  std::vector<size_t> strides;
  for (size_t bytes : bytes_per_token) {
    if (bytes < granule)
      return invalid_argument("a rung's records take fewer bytes a token (" + format_count(bytes) +
                              ") than the last rung's (" + format_count(granule) + ")");
    const size_t stride = (bytes + granule - 1) / granule * granule;
    // A rung no smaller than the one above it in the tier frees nothing when
    // a node is demoted to it (e.g. records padded alike by --record-align).
    if (!strides.empty() && stride >= strides.back())
      return invalid_argument("a rung takes as many bytes a token in the tier (" + format_count(stride) +
                              ") as the one above it: demoting to it would free nothing");
    strides.push_back(stride);
  }
  return strides;
}

KvGeometry tp_host_geometry(const KvGeometry& rank) {
  KvGeometry g = rank;
  g.num_layers = rank.num_layers * rank.tp_size;
  return g;
}

Result<std::unique_ptr<HostKvPool>> HostKvPool::create(const KvGeometry& geometry, const HostKvPoolOptions& options,
                                                     size_t l1_tokens) {
  HIQ_RETURN_IF_ERROR(geometry.validate());
  // The codecs read and write BF16 rows; an FP16 L1 can only be copied as it is.
  if (geometry.l1_dtype != L1Dtype::kBf16 && (options.codec != KvCodecs(CodecKind::kBf16) || !options.demotion.empty()))
    return invalid_argument("--hicache-codec " + host_codec_name(options) +
                            " needs a BF16 L1; this model's L1 is " + std::string(l1_dtype_name(geometry.l1_dtype)) +
                            " (use --hicache-codec bf16, which copies rows unchanged)");
  HIQ_RETURN_IF_ERROR(check_ladder(options).with_context("--hicache-codec"));
  std::vector<KvCodecs> codecs = {options.codec};
  codecs.insert(codecs.end(), options.demotion.begin(), options.demotion.end());
  std::vector<Rung> rungs;
  for (const KvCodecs& codec : codecs) {
    Rung r{codec, {}, {}, 0};
    HIQ_ASSIGN_OR_RETURN(r.k, RecordLayout::make(codec.k, geometry.row_shape(KvPart::kK), options.record_align));
    if (geometry.attention == AttentionKind::kMha) {  // MLA: no V records
      HIQ_ASSIGN_OR_RETURN(r.v, RecordLayout::make(codec.v, geometry.row_shape(KvPart::kV), options.record_align));
    }
    r.bytes_per_token = (r.k.record_bytes + r.v.record_bytes) * static_cast<size_t>(geometry.num_layers);
    rungs.push_back(r);
  }
  std::vector<size_t> sizes;
  for (const Rung& r : rungs) sizes.push_back(r.bytes_per_token);
  const auto strides = ladder_token_strides(sizes);
  if (!strides) return strides.status().with_context("--hicache-codec " + host_codec_name(options));
  const uint64_t granule = strides->back();
  std::vector<uint32_t> spans;
  for (size_t stride : *strides) spans.push_back(static_cast<uint32_t>(stride / granule));
  const uint64_t bytes_per_token = strides->front();
  const auto page = static_cast<uint64_t>(geometry.page_size);
  uint64_t tokens = 0;
  if (options.capacity_tokens > 0) {
    tokens = options.capacity_tokens / page * page;
    if (tokens == 0)
      return invalid_argument("--hicache-tokens " + std::to_string(options.capacity_tokens) + " is less than one page of " +
                              std::to_string(page) + " tokens");
  } else if (options.size_bytes > 0) {
    tokens = options.size_bytes / bytes_per_token / page * page;
    if (tokens == 0)
      return invalid_argument("--hicache-size " + format_bytes(options.size_bytes) + " holds no page of " +
                              std::to_string(page) + " token(s) at " + format_count(bytes_per_token) +
                              " B/token (" + options.codec.name() + ")");
  } else {
    if (!(options.ratio > 0) || !std::isfinite(options.ratio))
      return invalid_argument("--hicache-ratio must be a positive number (got " + std::to_string(options.ratio) + ")");
    const double wanted = options.ratio * static_cast<double>(l1_tokens);
    if (wanted >= static_cast<double>(std::numeric_limits<SlotId>::max()) + 1)
      return out_of_range("--hicache-ratio " + std::to_string(options.ratio) + " of " + std::to_string(l1_tokens) +
                          " L1 tokens is more than 2^32-1 slots");
    tokens = static_cast<uint64_t>(wanted) / page * page;
    if (tokens == 0)
      return invalid_argument("--hicache-ratio " + std::to_string(options.ratio) + " of " + std::to_string(l1_tokens) +
                              " L1 tokens is less than one page");
  }
  // Checked before multiplying: --hicache-tokens may be any 64-bit count.
  const uint64_t span = spans.front();
  if (tokens > std::numeric_limits<SlotId>::max() / span)
    return out_of_range("the host tier would hold " + format_count(tokens) + " tokens" +
                        (span > 1 ? " of " + std::to_string(span) + " granules each" : std::string()) +
                        ", more than 2^32-1 slots");
  const uint64_t granules = tokens * span;
  const RecordOrder order = rungs.size() > 1 ? RecordOrder::kTokenMajor : options.record_order;
  HIQ_ASSIGN_OR_RETURN(MappedRegion memory, MappedRegion::reserve(tokens * bytes_per_token, options.populate));
  return std::unique_ptr<HostKvPool>(
      new HostKvPool(geometry, std::move(rungs), std::move(spans), tokens, granules, granule, order, std::move(memory)));
}

std::string HostKvPool::codec_spec() const {
  HostKvPoolOptions options;
  options.codec = codec(0);
  for (int r = 1; r < rungs(); ++r) options.demotion.push_back(codec(r).k);
  return host_codec_name(options);
}

std::byte* HostKvPool::plane(int layer, KvPart part, int rung) {
  HIQ_DCHECK(layer >= 0 && layer < geometry_.num_layers && rung >= 0 && rung < rungs());
  HIQ_DCHECK(part == KvPart::kK || geometry_.attention == AttentionKind::kMha);
  const Rung& r = rung_(rung);
  if (order_ == RecordOrder::kTokenMajor)
    return memory_.data() + static_cast<size_t>(layer) * (r.k.record_bytes + r.v.record_bytes) +
           (part == KvPart::kV ? r.k.record_bytes : 0);
  const size_t k_plane = capacity_tokens_ * r.k.record_bytes;
  const size_t v_plane = capacity_tokens_ * r.v.record_bytes;
  return memory_.data() + static_cast<size_t>(layer) * (k_plane + v_plane) + (part == KvPart::kV ? k_plane : 0);
}

}  // namespace hiq
