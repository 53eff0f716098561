// tools/hiq/host_tier_flags.h — the host-tier flags every command that builds
// an L2 shares (`hiq sim`, `hiq serve`, `hiq bench serve`), registered and
// read in one place; and the --record-align check of every command that
// lays out records.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "core/units.h"
#include "memory/host_kv_pool.h"

namespace hiq::cli {

// The flags as typed. Commands differ in their defaults (`hiq sim` sizes
// the tier at 8 GB, `hiq serve` by ratio): set them before registering.
struct HostTierFlags {
  std::string size = "0";                      // --hicache-size; 0: from ratio
  double ratio = 2.0;                          // --hicache-ratio
  int64_t tokens = 0;                          // --hicache-tokens; 0: off
  std::string write_policy = "write_through";  // --hicache-write-policy
  std::string codec = "int8";                  // --hicache-codec
  int64_t record_align = static_cast<int64_t>(kDefaultRecordAlign);  // --record-align
  bool none = false;                           // --no-hicache
};

inline void add_host_tier_flags(CLI::App* app, HostTierFlags& flags) {
  HostTierFlags* f = &flags;
  app->add_option("--hicache-size", f->size, "Host (L2) budget: 8GB, 8GiB, fractions; 0 uses --hicache-ratio")
      ->capture_default_str();
  app->add_option("--hicache-ratio", f->ratio, "L2 tokens per L1 token, when --hicache-size is 0")
      ->capture_default_str();
  app->add_option("--hicache-tokens", f->tokens,
                  "L2 capacity in tokens whatever the codec (overrides --hicache-size; 0: off)")
      ->capture_default_str();
  app->add_option("--hicache-write-policy", f->write_policy, "write_through, write_through_selective or write_back")
      ->capture_default_str();
  app->add_option("--hicache-codec", f->codec, "L2 codec: bf16, int8, fp8, int4, int4h")->capture_default_str();
  app->add_option("--record-align", f->record_align, "Pad L2 records to a multiple of this many bytes")
      ->capture_default_str();
  app->add_flag("--no-hicache", f->none, "No host tier: L1 only");
}

// --record-align: a power of two from 1 to kMaxRecordAlign.
inline Result<size_t> record_align_option(int64_t record_align) {
  if (record_align <= 0 || record_align > static_cast<int64_t>(kMaxRecordAlign) ||
      (record_align & (record_align - 1)) != 0)
    return invalid_argument("--record-align must be a power of two from 1 to " + std::to_string(kMaxRecordAlign) +
                            " (got " + std::to_string(record_align) + ")");
  return static_cast<size_t>(record_align);
}

// The pool options of the flags (not --no-hicache or the write policy: the
// caller's config holds those). Errors name the flag.
inline Result<HostKvPoolOptions> host_tier_options(const HostTierFlags& f) {
  HostKvPoolOptions o;
  HIQ_ASSIGN_OR_RETURN(o.codec, parse_codec(f.codec));
  HIQ_ASSIGN_OR_RETURN(o.record_align, record_align_option(f.record_align));
  auto bytes = parse_byte_size(f.size, kGB);
  if (!bytes) return bytes.status().with_context("--hicache-size");
  o.size_bytes = *bytes;
  if (*bytes == 0) {
    if (!(f.ratio > 0)) return invalid_argument("--hicache-size 0 needs a positive --hicache-ratio");
    o.ratio = f.ratio;
  }
  if (f.tokens < 0) return invalid_argument("--hicache-tokens must not be negative");
  o.capacity_tokens = static_cast<uint64_t>(f.tokens);
  return o;
}

}  // namespace hiq::cli
