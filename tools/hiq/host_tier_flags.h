// tools/hiq/host_tier_flags.h — the host-tier flags every command that builds
// an L2 shares (`hiq sim`, `hiq serve`, `hiq bench serve`), registered and
// read in one place; and the --record-align check of every command that
// lays out records.
#pragma once

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "cache/radix_cache.h"
#include "core/units.h"
#include "memory/host_kv_pool.h"

namespace hiq::cli {

// The flags as typed. The host budget is --hicache-tokens, --hicache-size or
// --hicache-ratio; as in SGLang, a non-zero --hicache-size is the budget and
// --hicache-size 0 sizes the tier by --hicache-ratio. Flags the user typed are
// never dropped in silence: a non-zero --hicache-size (or --hicache-tokens)
// with an explicit --hicache-ratio is refused, naming both. The command's
// default budget (`hiq sim`: 8 GB; `hiq serve`, `hiq bench serve`: a ratio of
// 2) applies only when neither --hicache-size nor --hicache-ratio is typed.
// --hicache-tokens overrides --hicache-size (documented on the flag: an
// equal-capacity comparison on top of a common budget).
struct HostTierFlags {
  std::optional<std::string> size;             // --hicache-size as typed; unset: not given
  std::optional<double> ratio;                 // --hicache-ratio as typed; unset: not given
  int64_t tokens = 0;                          // --hicache-tokens; 0: off
  std::string write_policy = "write_through";  // --hicache-write-policy
  std::string codec = "int8";                  // --hicache-codec
  int64_t record_align = static_cast<int64_t>(kDefaultRecordAlign);  // --record-align
  bool none = false;                           // --no-hicache
  int64_t demotion_threads = RadixCacheOptions{}.demotion_threads;  // --hicache-demotion-threads (a ladder)
  double demotion_watermark = RadixCacheOptions{}.demotion_watermark;  // --hicache-demotion-watermark (a ladder)
  // The command's defaults; set them before registering.
  std::string default_size = "0";  // the budget when neither size nor ratio is typed; "0": by ratio
  double default_ratio = 2.0;      // the ratio when the budget is by ratio and none is typed (SGLang's)
};

// A ratio as the user would type it: "4", "2.5".
inline std::string format_ratio(double ratio) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", ratio);
  return buf;
}

inline void add_host_tier_flags(CLI::App* app, HostTierFlags& flags) {
  HostTierFlags* f = &flags;
  const bool by_ratio = f->default_size == "0";
  const std::string ratio_default = format_ratio(f->default_ratio);
  app->add_option("--hicache-size", f->size,
                  "Host (L2) budget: 8GB, 8GiB, fractions; 0: by --hicache-ratio (default: " +
                      (by_ratio ? std::string("by ratio") : f->default_size) + "; non-zero: not with --hicache-ratio)");
  app->add_option("--hicache-ratio", f->ratio,
                  "L2 tokens per L1 token, instead of --hicache-size (default: " + ratio_default +
                      (by_ratio ? std::string() : " when --hicache-size is 0") + ")");
  app->add_option("--hicache-tokens", f->tokens,
                  "L2 capacity in tokens whatever the codec (overrides --hicache-size; not with --hicache-ratio; 0: off)")
      ->capture_default_str();
  app->add_option("--hicache-write-policy", f->write_policy, "write_through, write_through_selective or write_back")
      ->capture_default_str();
  app->add_option("--hicache-codec", f->codec,
                  "L2 codec: bf16, int8, fp8, int4, int4h; one for keys and one for values: k=int8,v=int4h; or a ladder cold "
                  "nodes are demoted down instead of dropped: tiered:int8,int4h")
      ->capture_default_str();
  app->add_option("--record-align", f->record_align, "Pad L2 records to a multiple of this many bytes")
      ->capture_default_str();
  app->add_flag("--no-hicache", f->none, "No host tier: L1 only");
  app->add_option("--hicache-demotion-threads", f->demotion_threads,
                  "A ladder (tiered:…): threads that demote cold nodes")
      ->capture_default_str();
  app->add_option("--hicache-demotion-watermark", f->demotion_watermark,
                  "A ladder (tiered:…): demote ahead of need while less than this fraction of L2 is free, up to "
                  "twice it (0: demote only when an allocation needs the room)")
      ->capture_default_str();
}

// --record-align: a power of two from 1 to kMaxRecordAlign.
inline Result<size_t> record_align_option(int64_t record_align) {
  if (record_align <= 0 || record_align > static_cast<int64_t>(kMaxRecordAlign) ||
      (record_align & (record_align - 1)) != 0)
    return invalid_argument("--record-align must be a power of two from 1 to " + std::to_string(kMaxRecordAlign) +
                            " (got " + std::to_string(record_align) + ")");
  return static_cast<size_t>(record_align);
}

// The cache's options of the flags: the write policy, and how a ladder demotes.
inline Status apply_host_cache_flags(const HostTierFlags& f, RadixCacheOptions& o) {
  HIQ_ASSIGN_OR_RETURN(o.write_policy, parse_write_policy(f.write_policy));
  if (f.demotion_threads < 1 || f.demotion_threads > 256)
    return invalid_argument("--hicache-demotion-threads must be from 1 to 256 (got " +
                            std::to_string(f.demotion_threads) + ")");
  o.demotion_threads = static_cast<int>(f.demotion_threads);
  if (!(f.demotion_watermark >= 0 && f.demotion_watermark <= 0.5))  // NaN fails both
    return invalid_argument("--hicache-demotion-watermark must be a fraction from 0 to 0.5 (got " +
                            format_ratio(f.demotion_watermark) + ")");
  o.demotion_watermark = f.demotion_watermark;
  return Status::ok();
}

// The pool options of the flags (not --no-hicache or the write policy: the
// caller's config holds those). Errors name the flag; flags that would
// override one another are refused, naming both.
inline Result<HostKvPoolOptions> host_tier_options(const HostTierFlags& f) {
  HostKvPoolOptions o;
  HIQ_RETURN_IF_ERROR(parse_host_codec(f.codec, o).with_context("--hicache-codec"));
  HIQ_ASSIGN_OR_RETURN(o.record_align, record_align_option(f.record_align));
  if (f.tokens < 0) return invalid_argument("--hicache-tokens must not be negative");
  o.capacity_tokens = static_cast<uint64_t>(f.tokens);
  const bool typed = f.size.has_value() || f.ratio.has_value();
  auto bytes = parse_byte_size(typed ? f.size.value_or("0") : f.default_size, kGB);
  if (!bytes) return bytes.status().with_context("--hicache-size");
  o.size_bytes = *bytes;
  if (f.ratio && f.tokens > 0)
    return invalid_argument("--hicache-tokens " + std::to_string(f.tokens) + " and --hicache-ratio " +
                            format_ratio(*f.ratio) + " both size the host tier: give one of them");
  if (f.ratio && *bytes > 0)
    return invalid_argument("--hicache-size " + *f.size + " and --hicache-ratio " + format_ratio(*f.ratio) +
                            " both size the host tier: give one of them (--hicache-ratio is read when "
                            "--hicache-size is 0)");
  if (*bytes == 0) {
    o.ratio = f.ratio.value_or(f.default_ratio);
    if (!(o.ratio > 0) || !std::isfinite(o.ratio))
      return invalid_argument("--hicache-ratio must be a positive number (got " + format_ratio(o.ratio) + ")");
  }
  return o;
}

}  // namespace hiq::cli
