#include "storage/file_backend.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <system_error>
#include <vector>

#include "core/log.h"
#include "core/units.h"
#include "storage/lru_index.h"

namespace hiq {

int FileOps::open(const char* path, int flags, mode_t mode) { return ::open(path, flags, mode); }
ssize_t FileOps::read(int fd, void* buffer, size_t bytes) { return ::read(fd, buffer, bytes); }
ssize_t FileOps::write(int fd, const void* buffer, size_t bytes) { return ::write(fd, buffer, bytes); }
int FileOps::fsync(int fd) { return ::fsync(fd); }
int FileOps::close(int fd) { return ::close(fd); }
int FileOps::rename(const char* from, const char* to) { return ::rename(from, to); }
int FileOps::unlink(const char* path) { return ::unlink(path); }

Status FileBackendOptions::validate() const {
  if (path.empty()) return invalid_argument("file storage: the path is empty");
  if (capacity_bytes == 0) return invalid_argument("file storage: the size must be positive (e.g. \"64GB\")");
  if (max_value_bytes == 0) return invalid_argument("file storage: max_value_bytes must be positive");
  return Status::ok();
}

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kValueSuffix = ".kv";
constexpr std::string_view kTempSuffix = ".tmp";

std::string errno_text(int error) { return std::error_code(error, std::generic_category()).message(); }

// A failed system call on `path` as a Status: a full disk is kResourceExhausted,
// anything else kUnavailable (the disk or the mount is failing).
Status io_error(std::string_view what, const std::string& path, int error) {
  std::string message = "file storage: " + std::string(what) + " " + path + ": " + errno_text(error);
  if (error == ENOSPC || error == EDQUOT || error == EFBIG) return resource_exhausted(message + " (disk full)");
  return unavailable(std::move(message));
}

std::optional<StorageKey> parse_key(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  StorageKey key;
  for (size_t i = 0; i < 16; ++i) {
    int byte = 0;
    for (size_t j = 0; j < 2; ++j) {
      const char c = hex[2 * i + j];
      int digit;
      if (c >= '0' && c <= '9') digit = c - '0';
      else if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
      else return std::nullopt;
      byte = byte * 16 + digit;
    }
    key.bytes[i] = static_cast<uint8_t>(byte);
  }
  return key;
}

struct NoEntry {};

class FileBackend final : public StorageBackend {
 public:
  explicit FileBackend(const FileBackendOptions& options)
      : options_(options), ops_(options.ops ? options.ops : std::make_shared<FileOps>()) {}

  // The startup scan: temporary files deleted, values indexed oldest first.
  Status scan() {
    std::error_code ec;
    fs::create_directories(options_.path, ec);
    if (ec) return unavailable("file storage: cannot create " + options_.path + ": " + ec.message());
    struct Found {
      StorageKey key;
      size_t bytes;
      struct timespec mtime;
      std::string name;
    };
    std::vector<Found> found;
    size_t temporaries = 0;
    for (fs::directory_iterator dir(options_.path, ec), end; !ec && dir != end; dir.increment(ec)) {
      const std::string prefix = dir->path().filename().string();
      std::error_code inner;
      if (prefix.size() != 2 || !dir->is_directory(inner)) continue;
      for (fs::directory_iterator file(dir->path(), inner); !inner && file != end; file.increment(inner)) {
        const std::string name = file->path().filename().string();
        const std::string full = file->path().string();
        if (name.ends_with(kTempSuffix)) {
          if (ops_->unlink(full.c_str()) == 0) ++temporaries;
          continue;
        }
        if (!name.ends_with(kValueSuffix)) continue;
        const auto key = parse_key(std::string_view(name).substr(0, name.size() - kValueSuffix.size()));
        struct stat st;
        if (!key || key->hex().compare(0, 2, prefix) != 0 || ::stat(full.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
          continue;
        found.push_back({*key, static_cast<size_t>(st.st_size), st.st_mtim, name});
      }
      if (inner) return unavailable("file storage: cannot read " + dir->path().string() + ": " + inner.message());
    }
    if (ec) return unavailable("file storage: cannot read " + options_.path + ": " + ec.message());

    std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
      if (a.mtime.tv_sec != b.mtime.tv_sec) return a.mtime.tv_sec < b.mtime.tv_sec;
      if (a.mtime.tv_nsec != b.mtime.tv_nsec) return a.mtime.tv_nsec < b.mtime.tv_nsec;
      return a.name < b.name;
    });
    std::lock_guard lock(mutex_);
    for (const Found& f : found) index_.put(f.key, f.bytes, NoEntry{});
    const size_t evicted = evict_locked();
    log(LogLevel::kInfo, "storage",
        "file storage " + options_.path + ": " + std::to_string(index_.size()) + " values (" +
            format_bytes(index_.bytes()) + ") of " + format_bytes(options_.capacity_bytes) + "; removed " +
            std::to_string(temporaries) + " temporary file(s), evicted " + std::to_string(evicted));
    return Status::ok();
  }

  std::string_view name() const override { return "file"; }

  Result<size_t> exists(std::span<const StorageKey> keys) override {
    size_t held = 0;
    for (; held < keys.size(); ++held) {
      {
        std::lock_guard lock(mutex_);
        if (index_.find(keys[held]) != nullptr) continue;
      }
      // Not known here: another process sharing the directory may have written it.
      struct stat st;
      if (::stat(path_of(keys[held]).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) break;
      adopt(keys[held], static_cast<size_t>(st.st_size));
    }
    return held;
  }

  Status read(std::span<const StorageKey> keys, const ValueVisitor& visit) override {
    // One buffer per worker thread, reused for every value it reads: a fresh
    // allocation per value costs its page faults, more than the read itself.
    thread_local std::vector<std::byte> buffer;
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::string path = path_of(keys[i]);
      const int fd = ops_->open(path.c_str(), O_RDONLY | O_CLOEXEC, 0);
      size_t bytes = 0;
      if (fd >= 0) {
        const Status status = read_whole(fd, path, buffer, bytes);
        if (status.is_ok() && bytes > 0) (void)::futimens(fd, nullptr);  // the LRU order a restart sees
        ops_->close(fd);
        HIQ_RETURN_IF_ERROR(status);
      } else if (errno != ENOENT) {
        return io_error("open", path, errno);
      }
      if (bytes == 0) {
        forget(keys[i]);
      } else {
        std::lock_guard lock(mutex_);
        if (index_.touch(keys[i]) == nullptr) {
          index_.put(keys[i], bytes, NoEntry{});
          evict_locked(&keys[i]);
        }
      }
      if (!visit(i, std::span<const std::byte>(buffer).first(bytes))) break;
    }
    return Status::ok();
  }

  Status set(std::span<const StorageKey> keys, std::span<const std::vector<std::byte>> values) override {
    if (keys.size() != values.size())
      return invalid_argument("file storage: " + std::to_string(keys.size()) + " keys but " +
                              std::to_string(values.size()) + " values");
    for (const auto& value : values) {
      if (value.empty()) return invalid_argument("file storage: an empty value");
      const uint64_t most = std::min<uint64_t>(options_.capacity_bytes, options_.max_value_bytes);
      if (value.size() > most)
        return resource_exhausted("file storage: a value of " + std::to_string(value.size()) + " bytes exceeds " +
                                  (most == options_.capacity_bytes ? "the capacity of " : "max_value_bytes, ") +
                                  format_bytes(most));
    }
    for (size_t i = 0; i < keys.size(); ++i) HIQ_RETURN_IF_ERROR(write_one(keys[i], values[i]));
    return Status::ok();
  }

  Status remove(std::span<const StorageKey> keys) override {
    std::lock_guard lock(mutex_);
    for (const StorageKey& key : keys) {
      index_.erase(key);
      const std::string path = path_of(key);
      if (ops_->unlink(path.c_str()) != 0 && errno != ENOENT) return io_error("unlink", path, errno);
    }
    return Status::ok();
  }

 private:
  std::string path_of(const StorageKey& key) const { return file_backend_path(options_.path, key); }

  // Reads the file into `buffer` (grown as needed, never shrunk); `bytes`:
  // how many it holds, 0 for an empty or oversized file.
  Status read_whole(int fd, const std::string& path, std::vector<std::byte>& buffer, size_t& bytes) {
    bytes = 0;
    struct stat st;
    if (::fstat(fd, &st) != 0) return io_error("stat", path, errno);
    if (st.st_size <= 0 || static_cast<uint64_t>(st.st_size) > options_.max_value_bytes) return Status::ok();
    const auto size = static_cast<size_t>(st.st_size);
    if (buffer.size() < size) buffer.resize(size);
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ops_->read(fd, buffer.data() + done, size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return io_error("read", path, errno);
      if (n == 0) break;  // shorter than it was: the checksum will tell
      done += static_cast<size_t>(n);
    }
    bytes = done;
    return Status::ok();
  }


  Status write_one(const StorageKey& key, const std::vector<std::byte>& value) {
    const std::string path = path_of(key);
    const std::string temp = path.substr(0, path.size() - kValueSuffix.size()) + "." + std::to_string(::getpid()) +
                             "." + std::to_string(next_temp_.fetch_add(1)) + std::string(kTempSuffix);
    const int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
    int fd = ops_->open(temp.c_str(), flags, 0644);
    if (fd < 0 && errno == ENOENT) {  // the first value of this prefix: make its directory
      std::error_code ec;
      fs::create_directories(fs::path(temp).parent_path(), ec);
      fd = ops_->open(temp.c_str(), flags, 0644);
    }
    if (fd < 0) return io_error("create", temp, errno);

    Status status = write_all(fd, temp, value);
    if (status.is_ok() && options_.fsync && ops_->fsync(fd) != 0) status = io_error("fsync", temp, errno);
    if (ops_->close(fd) != 0 && status.is_ok()) status = io_error("close", temp, errno);
    if (status.is_ok()) {
      std::lock_guard lock(mutex_);
      if (ops_->rename(temp.c_str(), path.c_str()) == 0) {
        index_.put(key, value.size(), NoEntry{});
        evict_locked(&key);
        return Status::ok();
      }
      status = io_error("rename", temp, errno);
    }
    ops_->unlink(temp.c_str());
    return status;
  }

  Status write_all(int fd, const std::string& temp, const std::vector<std::byte>& value) {
    size_t done = 0;
    while (done < value.size()) {
      const ssize_t n = ops_->write(fd, value.data() + done, value.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return io_error("write", temp, errno);
      if (n == 0)
        return resource_exhausted("file storage: write " + temp + ": short write (" + std::to_string(done) + " of " +
                                  std::to_string(value.size()) + " bytes; disk full?)");
      done += static_cast<size_t>(n);
    }
    return Status::ok();
  }

  void adopt(const StorageKey& key, size_t bytes) {
    std::lock_guard lock(mutex_);
    if (index_.find(key) != nullptr) return;
    index_.put(key, bytes, NoEntry{});
    evict_locked(&key);
  }

  void forget(const StorageKey& key) {
    std::lock_guard lock(mutex_);
    index_.erase(key);
  }

  // Unlinks least recently used files until the index fits the capacity,
  // never `keep` (the value just written or read). Returns how many.
  size_t evict_locked(const StorageKey* keep = nullptr) {
    size_t evicted = 0;
    while (index_.bytes() > options_.capacity_bytes) {
      auto oldest = index_.pop_oldest();
      if (!oldest) break;
      if (keep != nullptr && oldest->key == *keep) {  // alone above the capacity (can only be adopted)
        index_.put(oldest->key, oldest->bytes, NoEntry{});
        break;
      }
      ops_->unlink(path_of(oldest->key).c_str());
      ++evicted;
    }
    return evicted;
  }

  const FileBackendOptions options_;
  const std::shared_ptr<FileOps> ops_;
  std::atomic<uint64_t> next_temp_{0};
  std::mutex mutex_;  // guards index_; renames and unlinks happen under it, so the index matches the directory
  LruIndex<NoEntry> index_;
};

}  // namespace

std::string file_backend_path(const std::string& path, const StorageKey& key) {
  const std::string hex = key.hex();
  return path + "/" + hex.substr(0, 2) + "/" + hex + std::string(kValueSuffix);
}

Result<std::unique_ptr<StorageBackend>> make_file_backend(const FileBackendOptions& options) {
  HIQ_RETURN_IF_ERROR(options.validate());
  auto backend = std::make_unique<FileBackend>(options);
  HIQ_RETURN_IF_ERROR(backend->scan());
  return std::unique_ptr<StorageBackend>(std::move(backend));
}

}  // namespace hiq
