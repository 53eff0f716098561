// storage/file_backend.h — L3 in a directory: local disk or a shared mount.
//
// One file per key, `<path>/<first 2 hex digits>/<32 hex digits>.kv`, holding
// the value as set. Design:
//
//   - Writes are atomic: the value goes to a temporary file in the same
//     directory (`<hex>.<pid>.<n>.tmp`), which is renamed over the final name
//     only once every byte is written (and fsynced, with `fsync`). A reader
//     sees the old file, the new one or none; a crash leaves only a `.tmp`,
//     which the next start deletes. Any failure — a full disk (ENOSPC,
//     EDQUOT), a short write, an I/O error — removes the temporary file and
//     fails the call: no partial value is ever readable under a key.
//   - Capacity: the bytes of the values this process knows of are bounded by
//     `capacity_bytes`; a set beyond it unlinks least recently used files
//     (written or read) until it fits. A file's size is counted, not the
//     blocks it occupies.
//   - Restart: the index (key, size, LRU order) is rebuilt from the directory
//     at start, ordered by modification times (a read refreshes its file's
//     mtime), so a restarted server finds its KV and evicts in the same order.
//   - Sharing: reads and exists() look at the directory itself, so values
//     written by another process sharing the mount are found (and counted from
//     then on). Each process enforces its capacity over what it knows; two
//     processes with their own budgets over one directory may together exceed
//     either. A process that starts deletes every `.tmp` present, including
//     the one of a peer's write in progress, whose rename then fails (an error
//     that loses nothing).
//   - Durability: without `fsync` a power loss may leave a renamed file empty
//     or torn; its checksum (storage_value.h) turns it into a miss.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "storage/storage_backend.h"

namespace hiq {

// The system calls the file backend makes on values, as POSIX defines them
// (-1 and errno on failure). The base class makes the real calls; a test
// overrides one to simulate a full disk or a short write deterministically.
class FileOps {
 public:
  virtual ~FileOps() = default;
  virtual int open(const char* path, int flags, mode_t mode);
  virtual ssize_t read(int fd, void* buffer, size_t bytes);
  virtual ssize_t write(int fd, const void* buffer, size_t bytes);
  virtual int fsync(int fd);
  virtual int close(int fd);
  virtual int rename(const char* from, const char* to);
  virtual int unlink(const char* path);
};

struct FileBackendOptions {
  std::string path;                 // the directory; created (with its parents) if missing
  uint64_t capacity_bytes = 0;      // bytes of values kept; required (extra config "size", e.g. "64GB")
  bool fsync = false;               // fsync each value before its rename: survives power loss, costs a flush
  uint64_t max_value_bytes = uint64_t{1} << 32;  // a larger file under a key's name is not read (a miss)
  std::shared_ptr<FileOps> ops;     // null: the real system calls

  // Errors (kInvalidArgument): an empty path, a capacity of 0, a max_value_bytes of 0.
  Status validate() const;
};

// Opens (or creates) the directory and rebuilds the index from it: deletes
// every `.tmp`, takes every `<hex>.kv` with its size and mtime, and evicts the
// oldest files beyond the capacity. Errors: invalid options, a path that
// cannot be created or read (kUnavailable).
Result<std::unique_ptr<StorageBackend>> make_file_backend(const FileBackendOptions& options);

// Where the file backend keeps `key`'s value under `path` (for tests and tools).
std::string file_backend_path(const std::string& path, const StorageKey& key);

}  // namespace hiq
