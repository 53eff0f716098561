// storage/storage_bench.h — `hiq bench storage`: what L3's backends write and
// read, against the raw rate of the same medium measured in the same run.
//
// A value is one stored page of one codec: the 64-byte header
// (storage_value.h) and block_tokens × bytes_per_token of L2 records, here
// random bytes (no backend looks inside a value). For each codec and backend:
//
//   - write: every value set() in batches of `batch`, into a store emptied of
//     the previous run's keys (untimed). The values are encoded once before
//     (encode_value: header and XXH3 of the payload), timed apart in encode_s.
//   - read: the same keys read() in the same batches, each value checked by
//     decode_value where the backend hands it over, as StorageEngine checks
//     it; the check is inside the time (and its own part is decode_s).
//   - the reference, same sizes, same medium, one caller:
//       file   one file per value in a directory beside the backend's:
//              open/write/close (and fsync, when the backend fsyncs), then
//              open/read/close into one reused buffer. Nothing is dropped from
//              the page cache, so the reads of both come from memory unless
//              the data outgrows it (StorageBenchReport::memory_bytes).
//       redis  SET and GET of the same bytes, pipelined in the same batches,
//              on one hiredis connection to the same server.
//       memory memcpy of each value into a buffer of its size (faulted in
//              before), and back out into one reused buffer.
//
// Each time is the median of `repeats` runs; the backend and its reference
// alternate within a run, so a drift of the machine touches both. One thread
// calls everything: this is one caller's rate, not StorageEngine's workers
// together. Everything written (files, Redis keys under the prefix) is removed
// at the end, error or not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "core/status.h"
#include "kv/geometry.h"
#include "storage/redis_backend.h"
#include "storage/storage_options.h"

namespace hiq {

struct StorageBenchOptions {
  KvGeometry geometry;                        // the model's KV (one TP rank)
  std::vector<CodecKind> codecs;              // one value size each
  std::vector<StorageBackendKind> backends;   // memory, file, redis (not none), in this order of rows
  size_t record_align = kDefaultRecordAlign;  // L2 record padding, as the host pool pads
  int block_tokens = 64;                      // tokens per stored page
  size_t values = 0;                          // values per codec; 0: enough for target_bytes
  uint64_t target_bytes = 1'000'000'000;      // with values 0: about this many bytes of values per codec
  size_t batch = 8;                           // values per set() or get() call (and per pipeline)
  int repeats = 3;                            // runs of each measurement; the median is reported
  // File: a directory (created if missing) in which a fresh subdirectory
  // `hiq-bench-storage.<pid>` holds the backend's files and the reference's,
  // and is removed at the end. What else the directory holds is not touched.
  std::string directory;
  bool fsync = false;                         // the file backend and its reference fsync every value
  RedisBackendOptions redis;                  // the server both redis measurements use, and the key prefix
  uint64_t seed = 1;                          // of the payload bytes and the token ids behind the keys

  // Errors (kInvalidArgument, the message starts with the field's name): an
  // invalid geometry, no codec or backend, backend none or twice, block_tokens
  // outside [1, 1 << 20], batch or repeats or target_bytes 0, repeats over
  // 1000, an empty directory with the file backend, invalid redis options
  // with the redis backend.
  Status validate() const;
};

struct StorageBenchRow {
  StorageBackendKind backend = StorageBackendKind::kFile;
  CodecKind codec = CodecKind::kBf16;
  size_t values = 0;           // values written and read per run
  size_t value_bytes = 0;      // one value: header + payload
  size_t payload_bytes = 0;    // block_tokens × bytes_per_token
  size_t bytes_per_token = 0;  // L2 bytes of one token, every layer, K and V (HostKvPool's)
  // Medians, seconds for all `values`:
  double write_s = 0;          // set() of the encoded values
  double read_s = 0;           // get() and decode_value of each
  double raw_write_s = 0;      // the reference's write of the same bytes
  double raw_read_s = 0;       // the reference's read of them
  double encode_s = 0;         // encode_value of every value (once; not in write_s)
  double decode_s = 0;         // the decode_value part of read_s

  uint64_t total_bytes() const { return static_cast<uint64_t>(values) * value_bytes; }
  // Tokens whose KV one second of reading brings back: values × block_tokens ÷ read_s.
  double tokens_per_s(int block_tokens) const;
};

struct StorageBenchReport {
  std::vector<StorageBenchRow> rows;  // codec-major, then the options' backend order
  std::string redis_version;          // of the server measured; empty without redis
  uint64_t memory_bytes = 0;          // physical memory of this machine
  uint64_t largest_file_bytes = 0;    // most bytes on disk at once (backend + reference); 0 without file
};

// "The reference of `backend`", in words, for reports.
std::string_view storage_bench_reference(StorageBackendKind backend);

// Runs every (codec, backend). `progress` (may be null) gets a line per step.
// Errors: invalid options; a value shape the codec refuses; too little free
// space in the directory for backend and reference (kResourceExhausted); any
// failed write, read or check (a value that fails decode_value is kDataLoss).
Result<StorageBenchReport> run_storage_bench(const StorageBenchOptions& options,
                                             const std::function<void(const std::string&)>& progress = nullptr);

// What a Redis server says of itself (INFO server), to tell whether it is up
// and whose it is. Errors: kUnavailable when it cannot be reached or answers
// otherwise, within the options' connect and command timeouts.
struct RedisServerInfo {
  std::string version;  // redis_version
  int64_t process_id = 0;
};
Result<RedisServerInfo> probe_redis_server(const RedisBackendOptions& options);

}  // namespace hiq
