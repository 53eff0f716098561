// storage/redis_backend.h — L3 in Redis, through hiredis.
//
// Each value is one Redis string under `key_prefix + key.hex()`, written with
// SET (atomic: a reader sees the old value, the new one or none). Batches are
// pipelined: every command of a batch is appended, then the replies are read
// in order (a set sends at most `pipeline_bytes` of values before reading
// their replies, so a large batch is not all buffered at once).
//
// Capacity and eviction are Redis's: run it with `maxmemory` and
// `maxmemory-policy allkeys-lru` (a SET refused for memory is
// kResourceExhausted). `ttl_seconds` gives values an expiry as well.
//
// Connections and failures. Calls take a connection from a mutex-guarded pool
// (one per calling thread at a time; at most `connections` are kept idle) and
// give it back after. Connecting and every command are bounded by timeouts.
// When Redis cannot be reached the call fails with kUnavailable, and for a
// while after — `reconnect_initial_ms`, doubling per failed attempt up to
// `reconnect_max_ms` — calls fail at once without touching the network; then
// one call tries to connect again (the others still fail fast). So a dead
// Redis costs the engine an error per call, never a stall. A pooled connection
// that turns out broken (Redis restarted while it was idle) is dropped with
// all idle ones and the call is retried once on a new connection, since every
// command here is idempotent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "storage/storage_backend.h"

namespace hiq {

struct RedisBackendOptions {
  std::string host = "127.0.0.1";         // extra config "host"
  int port = 6379;                         // "port"
  std::string key_prefix = "hiq:";         // "prefix": every key is prefix + 32 hex digits
  int connect_timeout_ms = 500;            // "connect_timeout_ms"
  int command_timeout_ms = 2000;           // "command_timeout_ms": a send or a reply waits at most this
  int reconnect_initial_ms = 100;          // "reconnect_initial_ms": first pause after a failure
  int reconnect_max_ms = 5000;             // "reconnect_max_ms": the pause doubles up to this
  int connections = 4;                     // "connections": idle connections kept
  int ttl_seconds = 0;                     // "ttl_s": expiry of each value; 0 = none
  size_t pipeline_bytes = size_t{64} << 20;  // values a set sends before reading their replies

  // Errors (kInvalidArgument, naming the field): an empty host, a port outside
  // [1, 65535], a timeout or pause that is not positive, reconnect_max_ms below
  // reconnect_initial_ms, connections < 1, ttl_seconds < 0, pipeline_bytes 0.
  Status validate() const;
};

// Connects lazily: creating the backend needs no running Redis (the first
// call connects). Errors: invalid options.
Result<std::unique_ptr<StorageBackend>> make_redis_backend(const RedisBackendOptions& options);

}  // namespace hiq
