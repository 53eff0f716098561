// tools/hiq/host_tier_flags.h — the host-tier flags every command that builds
// an L2 shares (`hiq sim`, `hiq serve`, `hiq bench serve`), read in one place.
#pragma once

#include <string>

#include "core/units.h"
#include "memory/host_kv_pool.h"

namespace hiq::cli {

// --hicache-codec, --record-align, and --hicache-size (or, when it is 0,
// --hicache-ratio). Errors name the flag.
inline Result<HostKvPoolOptions> host_tier_options(const std::string& codec, int64_t record_align,
                                                   const std::string& size, double ratio) {
  HostKvPoolOptions o;
  HIQ_ASSIGN_OR_RETURN(o.codec, parse_codec(codec));
  if (record_align <= 0 || record_align > static_cast<int64_t>(kMaxRecordAlign) ||
      (record_align & (record_align - 1)) != 0)
    return invalid_argument("--record-align must be a power of two from 1 to " + std::to_string(kMaxRecordAlign));
  o.record_align = static_cast<size_t>(record_align);
  auto bytes = parse_byte_size(size, kGB);
  if (!bytes) return bytes.status().with_context("--hicache-size");
  o.size_bytes = *bytes;
  if (*bytes == 0) {
    if (!(ratio > 0)) return invalid_argument("--hicache-size 0 needs a positive --hicache-ratio");
    o.ratio = ratio;
  }
  return o;
}

}  // namespace hiq::cli
