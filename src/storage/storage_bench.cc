#include "storage/storage_bench.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <span>
#include <string_view>
#include <system_error>

#include "core/units.h"
#include "storage/file_backend.h"
#include "storage/storage_key.h"
#include "storage/storage_value.h"

namespace hiq {

Status StorageBenchOptions::validate() const {
  HIQ_RETURN_IF_ERROR(geometry.validate());
  if (codecs.empty()) return invalid_argument("codecs must name at least one codec");
  if (backends.empty()) return invalid_argument("backends must name at least one backend");
  std::set<StorageBackendKind> seen;
  for (StorageBackendKind backend : backends) {
    if (backend == StorageBackendKind::kNone) return invalid_argument("backends cannot include none");
    if (!seen.insert(backend).second)
      return invalid_argument("backends names " + std::string(storage_backend_name(backend)) + " twice");
  }
  if (block_tokens < 1 || block_tokens > (1 << 20))
    return invalid_argument("block_tokens must be in [1, 1048576] (got " + std::to_string(block_tokens) + ")");
  if (batch == 0) return invalid_argument("batch must be positive");
  if (repeats < 1 || repeats > 1000)
    return invalid_argument("repeats must be in [1, 1000] (got " + std::to_string(repeats) + ")");
  if (values == 0 && target_bytes == 0) return invalid_argument("target_bytes must be positive when values is 0");
  if (seen.contains(StorageBackendKind::kFile) && directory.empty())
    return invalid_argument("directory must be given for the file backend");
  if (seen.contains(StorageBackendKind::kRedis)) HIQ_RETURN_IF_ERROR(redis.validate());
  return Status::ok();
}

double StorageBenchRow::tokens_per_s(int block_tokens) const {
  return read_s > 0 ? static_cast<double>(values) * block_tokens / read_s : 0;
}

std::string_view storage_bench_reference(StorageBackendKind backend) {
  switch (backend) {
    case StorageBackendKind::kFile: return "POSIX open/write/close and open/read/close of one file per value, same directory";
    case StorageBackendKind::kRedis: return "hiredis SET/GET pipelined in the same batches, same server, one connection";
    case StorageBackendKind::kMemory: return "memcpy of each value into a buffer of its size and back";
    case StorageBackendKind::kNone: break;
  }
  return "none";
}

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> times) {
  if (times.empty()) return 0;
  const auto middle = times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2);
  std::nth_element(times.begin(), middle, times.end());
  return *middle;
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void fill_random(std::span<std::byte> out, uint64_t& state) {
  size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    const uint64_t word = splitmix64(state);
    std::memcpy(out.data() + i, &word, 8);
  }
  if (i < out.size()) {
    const uint64_t word = splitmix64(state);
    std::memcpy(out.data() + i, &word, out.size() - i);
  }
}

std::string errno_text(int error) { return std::error_code(error, std::generic_category()).message(); }

// One codec's values: what every backend and reference of that codec writes.
struct Workload {
  CodecKind codec = CodecKind::kBf16;
  StorageFingerprint fingerprint;
  size_t payload_bytes = 0, bytes_per_token = 0;
  std::vector<StorageKey> keys;
  std::vector<std::vector<std::byte>> values;  // encoded: header + payload
  double encode_s = 0;

  size_t value_bytes() const { return kStorageHeaderBytes + payload_bytes; }
  uint64_t total_bytes() const { return static_cast<uint64_t>(value_bytes()) * keys.size(); }
};

// The fingerprint and page size of `codec`; values left empty.
Result<Workload> describe_workload(const StorageBenchOptions& o, CodecKind codec) {
  Workload w;
  w.codec = codec;
  w.fingerprint = make_storage_fingerprint(o.geometry, codec, o.record_align, o.block_tokens, "hiq-bench-storage");
  HIQ_ASSIGN_OR_RETURN(w.payload_bytes, storage_page_bytes(w.fingerprint));
  w.bytes_per_token = w.payload_bytes / static_cast<size_t>(o.block_tokens);
  const size_t count = o.values > 0 ? o.values
                                    : static_cast<size_t>(std::max<uint64_t>(
                                          1, (o.target_bytes + w.value_bytes() - 1) / w.value_bytes()));
  w.keys.resize(count);
  return w;
}

// Keys of a prompt of `keys.size()` blocks and a random payload per value, encoded (timed).
void make_values(Workload& w, int block_tokens, uint64_t seed) {
  uint64_t state = seed ^ (static_cast<uint64_t>(w.codec) << 56);
  std::vector<int32_t> tokens(w.keys.size() * static_cast<size_t>(block_tokens));
  for (int32_t& token : tokens) token = static_cast<int32_t>(splitmix64(state) % 151'936);
  w.keys = storage_keys(w.fingerprint, tokens);
  w.values.clear();
  w.values.reserve(w.keys.size());
  std::vector<std::byte> payload(w.payload_bytes);
  w.encode_s = 0;
  for (const StorageKey& key : w.keys) {
    fill_random(payload, state);
    const auto start = Clock::now();
    w.values.push_back(encode_value(w.fingerprint, key, payload));
    w.encode_s += seconds_since(start);
  }
}

// The raw rate of a backend's medium: the same bytes written and read with
// nothing of the backend's (no keys, headers checked, atomic renames, LRU).
class Reference {
 public:
  virtual ~Reference() = default;
  virtual Status prepare(const Workload& w) = 0;  // untimed: once per codec
  virtual Status clear(const Workload& w) = 0;    // untimed: before each write run, and at the end
  virtual Status write(const Workload& w) = 0;
  virtual Status read(const Workload& w) = 0;
};

class FileReference final : public Reference {
 public:
  FileReference(std::string directory, bool fsync) : directory_(std::move(directory)), fsync_(fsync) {}

  Status prepare(const Workload& w) override {
    buffer_.resize(w.value_bytes());
    return Status::ok();
  }

  Status clear(const Workload& w) override {
    for (size_t i = 0; i < w.values.size(); ++i) {
      const std::string path = path_of(i);
      if (::unlink(path.c_str()) != 0 && errno != ENOENT) return io_error("unlink", path);
    }
    return Status::ok();
  }

  Status write(const Workload& w) override {
    for (size_t i = 0; i < w.values.size(); ++i) {
      const std::string path = path_of(i);
      const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) return io_error("create", path);
      const std::vector<std::byte>& value = w.values[i];
      size_t done = 0;
      Status status;
      while (status.is_ok() && done < value.size()) {
        const ssize_t n = ::write(fd, value.data() + done, value.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) status = n < 0 ? io_error("write", path) : resource_exhausted("reference: short write " + path);
        else done += static_cast<size_t>(n);
      }
      if (status.is_ok() && fsync_ && ::fsync(fd) != 0) status = io_error("fsync", path);
      if (::close(fd) != 0 && status.is_ok()) status = io_error("close", path);
      HIQ_RETURN_IF_ERROR(status);
    }
    return Status::ok();
  }

  Status read(const Workload& w) override {
    for (size_t i = 0; i < w.values.size(); ++i) {
      const std::string path = path_of(i);
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return io_error("open", path);
      size_t done = 0;
      Status status;
      while (status.is_ok()) {
        const ssize_t n = ::read(fd, buffer_.data() + done, buffer_.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) status = io_error("read", path);
        if (n <= 0) break;
        done += static_cast<size_t>(n);
        if (done == buffer_.size()) break;
      }
      ::close(fd);
      HIQ_RETURN_IF_ERROR(status);
      if (done != w.values[i].size())
        return data_loss("reference: " + path + " holds " + std::to_string(done) + " of " +
                         std::to_string(w.values[i].size()) + " bytes");
    }
    return Status::ok();
  }

 private:
  std::string path_of(size_t i) const { return directory_ + "/" + std::to_string(i) + ".raw"; }
  static Status io_error(std::string_view what, const std::string& path) {
    return unavailable("reference: " + std::string(what) + " " + path + ": " + errno_text(errno));
  }

  const std::string directory_;
  const bool fsync_;
  std::vector<std::byte> buffer_;  // every read lands here: the reference keeps nothing it reads
};

class MemoryReference final : public Reference {
 public:
  Status prepare(const Workload& w) override {
    copies_.assign(w.values.size(), std::vector<std::byte>(w.value_bytes(), std::byte{1}));  // faulted in
    buffer_.assign(w.value_bytes(), std::byte{1});
    return Status::ok();
  }
  Status clear(const Workload&) override { return Status::ok(); }
  Status write(const Workload& w) override {
    for (size_t i = 0; i < w.values.size(); ++i) std::memcpy(copies_[i].data(), w.values[i].data(), w.values[i].size());
    return Status::ok();
  }
  Status read(const Workload& w) override {
    for (size_t i = 0; i < w.values.size(); ++i) std::memcpy(buffer_.data(), copies_[i].data(), copies_[i].size());
    // The copies must be seen to be used, or the compiler may drop them.
    volatile std::byte sink = buffer_[buffer_.size() / 2];
    (void)sink;
    return Status::ok();
  }

 private:
  std::vector<std::vector<std::byte>> copies_;
  std::vector<std::byte> buffer_;
};

struct ContextFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
using RedisContext = std::unique_ptr<redisContext, ContextFree>;
struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using RedisReply = std::unique_ptr<redisReply, ReplyFree>;

timeval to_timeval(int ms) {
  timeval tv{};
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

Result<RedisContext> connect_redis(const RedisBackendOptions& o) {
  const std::string endpoint = o.host + ":" + std::to_string(o.port);
  RedisContext c(redisConnectWithTimeout(o.host.c_str(), o.port, to_timeval(o.connect_timeout_ms)));
  if (!c) return unavailable("redis " + endpoint + ": cannot allocate a connection");
  if (c->err) return unavailable("redis " + endpoint + ": connect: " + std::string(c->errstr));
  if (redisSetTimeout(c.get(), to_timeval(o.command_timeout_ms)) != REDIS_OK)
    return unavailable("redis " + endpoint + ": cannot set the command timeout: " + std::string(c->errstr));
  return c;
}

class RedisReference final : public Reference {
 public:
  RedisReference(RedisContext context, std::string key_prefix, size_t batch)
      : context_(std::move(context)), prefix_(std::move(key_prefix) + "raw:"), batch_(batch) {}

  Status prepare(const Workload& w) override {
    names_.clear();
    for (size_t i = 0; i < w.values.size(); ++i) names_.push_back(prefix_ + std::to_string(i));
    return Status::ok();
  }

  Status clear(const Workload& w) override {
    return pipelined(w, "DEL", [&](size_t i) {
      return redisAppendCommand(context_.get(), "DEL %b", names_[i].data(), names_[i].size());
    }, [](size_t, const redisReply&) { return Status::ok(); });
  }

  Status write(const Workload& w) override {
    return pipelined(w, "SET", [&](size_t i) {
      return redisAppendCommand(context_.get(), "SET %b %b", names_[i].data(), names_[i].size(), w.values[i].data(),
                                w.values[i].size());
    }, [](size_t, const redisReply&) { return Status::ok(); });
  }

  Status read(const Workload& w) override {
    return pipelined(w, "GET", [&](size_t i) {
      return redisAppendCommand(context_.get(), "GET %b", names_[i].data(), names_[i].size());
    }, [&](size_t i, const redisReply& reply) {
      if (reply.type == REDIS_REPLY_STRING && reply.len == w.values[i].size()) return Status::ok();
      return data_loss("reference: GET " + names_[i] + " did not return the value set");
    });
  }

 private:
  // Appends `batch_` commands, then reads their replies, batch after batch.
  template <typename Append, typename Check>
  Status pipelined(const Workload& w, std::string_view command, Append append, Check check) {
    redisContext* c = context_.get();
    for (size_t first = 0; first < w.values.size(); first += batch_) {
      const size_t end = std::min(w.values.size(), first + batch_);
      for (size_t i = first; i < end; ++i)
        if (append(i) != REDIS_OK) return broken(command);
      for (size_t i = first; i < end; ++i) {
        void* raw = nullptr;
        if (redisGetReply(c, &raw) != REDIS_OK || raw == nullptr) return broken(command);
        const RedisReply reply(static_cast<redisReply*>(raw));
        if (reply->type == REDIS_REPLY_ERROR)
          return unavailable("reference: " + std::string(command) + ": " + std::string(reply->str, reply->len));
        HIQ_RETURN_IF_ERROR(check(i, *reply));
      }
    }
    return Status::ok();
  }

  Status broken(std::string_view command) const {
    return unavailable("reference: redis " + std::string(command) + ": " +
                       (context_->err ? std::string(context_->errstr) : std::string("cannot queue the command")));
  }

  RedisContext context_;
  const std::string prefix_;
  const size_t batch_;
  std::vector<std::string> names_;
};

// The backend's side of one row.
Status backend_write(StorageBackend& backend, const Workload& w, size_t batch) {
  for (size_t first = 0; first < w.keys.size(); first += batch) {
    const size_t n = std::min(batch, w.keys.size() - first);
    HIQ_RETURN_IF_ERROR(backend.set(std::span(w.keys).subspan(first, n), std::span(w.values).subspan(first, n)));
  }
  return Status::ok();
}

// Reads every value back through read() and checks it where the backend
// hands it over, as StorageEngine does; adds the checks' time to `decode_s`.
Status backend_read(StorageBackend& backend, const Workload& w, size_t batch, double& decode_s) {
  for (size_t first = 0; first < w.keys.size(); first += batch) {
    const size_t n = std::min(batch, w.keys.size() - first);
    const auto keys = std::span(w.keys).subspan(first, n);
    Status checked;
    HIQ_RETURN_IF_ERROR(backend.read(keys, [&](size_t i, std::span<const std::byte> value) {
      const auto start = Clock::now();
      if (value.empty()) {
        checked = data_loss(std::string(backend.name()) + " storage lost value " + std::to_string(first + i));
      } else if (auto payload = decode_value(value, w.fingerprint, keys[i], w.payload_bytes); !payload.is_ok()) {
        checked = payload.status().with_context(std::string(backend.name()) + " storage, value " +
                                                std::to_string(first + i));
      }
      decode_s += seconds_since(start);
      return checked.is_ok();
    }));
    HIQ_RETURN_IF_ERROR(checked);
  }
  return Status::ok();
}

// Removes what one codec wrote, on every path out (ignoring errors: the
// directory goes as a whole at the end; Redis keys are best effort).
class WrittenKeys {
 public:
  WrittenKeys(StorageBackend& backend, Reference& reference, const Workload& w)
      : backend_(backend), reference_(reference), workload_(w) {}
  ~WrittenKeys() {
    (void)backend_.remove(workload_.keys);
    (void)reference_.clear(workload_);
  }
  WrittenKeys(const WrittenKeys&) = delete;
  WrittenKeys& operator=(const WrittenKeys&) = delete;

 private:
  StorageBackend& backend_;
  Reference& reference_;
  const Workload& workload_;
};

// The bench's own subdirectory, removed with everything in it.
class BenchDirectory {
 public:
  ~BenchDirectory() {
    if (path_.empty()) return;
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  Status create(const std::string& parent) {
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec) return unavailable("cannot create " + parent + ": " + ec.message());
    const std::string path = parent + "/hiq-bench-storage." + std::to_string(::getpid());
    if (!fs::create_directory(path, ec) || ec)
      return unavailable("cannot create " + path + (ec ? ": " + ec.message() : ": it exists"));
    path_ = path;
    return Status::ok();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

struct BackendUnderTest {
  StorageBackendKind kind;
  std::unique_ptr<StorageBackend> backend;
  std::unique_ptr<Reference> reference;
};

}  // namespace

Result<RedisServerInfo> probe_redis_server(const RedisBackendOptions& options) {
  const std::string endpoint = options.host + ":" + std::to_string(options.port);
  HIQ_ASSIGN_OR_RETURN(RedisContext c, connect_redis(options));
  RedisReply reply(static_cast<redisReply*>(redisCommand(c.get(), "INFO server")));
  if (!reply || reply->type != REDIS_REPLY_STRING)
    return unavailable("redis " + endpoint + ": INFO server: " +
                       (c->err ? std::string(c->errstr)
                               : reply && reply->type == REDIS_REPLY_ERROR ? std::string(reply->str, reply->len)
                                                                           : std::string("no answer")));
  const std::string_view text(reply->str, reply->len);
  const auto field = [&](std::string_view name) -> std::string {
    const std::string tag = std::string(name) + ":";
    size_t at = text.find(tag);
    while (at != std::string_view::npos && at != 0 && text[at - 1] != '\n') at = text.find(tag, at + 1);
    if (at == std::string_view::npos) return "";
    const size_t begin = at + tag.size(), end = text.find_first_of("\r\n", begin);
    return std::string(text.substr(begin, end == std::string_view::npos ? end : end - begin));
  };
  RedisServerInfo info;
  info.version = field("redis_version");
  const std::string pid = field("process_id");
  if (info.version.empty()) return unavailable("redis " + endpoint + ": INFO server has no redis_version");
  info.process_id = pid.empty() ? 0 : std::strtoll(pid.c_str(), nullptr, 10);
  return info;
}

Result<StorageBenchReport> run_storage_bench(const StorageBenchOptions& options,
                                             const std::function<void(const std::string&)>& progress) {
  HIQ_RETURN_IF_ERROR(options.validate());
  const auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  std::vector<Workload> workloads;
  uint64_t most_bytes = 0;
  for (CodecKind codec : options.codecs) {
    HIQ_ASSIGN_OR_RETURN(Workload w, describe_workload(options, codec));
    most_bytes = std::max(most_bytes, w.total_bytes());
    workloads.push_back(std::move(w));
  }

  StorageBenchReport report;
  report.memory_bytes = physical_memory_bytes();
  BenchDirectory directory;
  std::vector<BackendUnderTest> under_test;
  for (StorageBackendKind kind : options.backends) {
    BackendUnderTest b{kind, nullptr, nullptr};
    // Capacities hold the largest codec's values twice over: nothing is evicted while measured.
    const uint64_t capacity = 2 * most_bytes + (uint64_t{1} << 20);
    switch (kind) {
      case StorageBackendKind::kMemory: {
        HIQ_ASSIGN_OR_RETURN(b.backend, make_memory_backend(capacity));
        b.reference = std::make_unique<MemoryReference>();
        break;
      }
      case StorageBackendKind::kFile: {
        HIQ_RETURN_IF_ERROR(directory.create(options.directory));
        struct statvfs fs_stat;
        if (::statvfs(directory.path().c_str(), &fs_stat) == 0) {
          const uint64_t free_bytes = static_cast<uint64_t>(fs_stat.f_bavail) * fs_stat.f_frsize;
          if (free_bytes < 2 * most_bytes + (uint64_t{64} << 20))
            return resource_exhausted("directory " + options.directory + " has " + format_bytes(free_bytes) +
                                      " free; the file backend and its reference need " +
                                      format_bytes(2 * most_bytes) + " at once");
        }
        const std::string reference_dir = directory.path() + "/reference";
        std::error_code ec;
        fs::create_directory(reference_dir, ec);
        if (ec) return unavailable("cannot create " + reference_dir + ": " + ec.message());
        FileBackendOptions file;
        file.path = directory.path() + "/l3";
        file.capacity_bytes = capacity;
        file.fsync = options.fsync;
        HIQ_ASSIGN_OR_RETURN(b.backend, make_file_backend(file));
        b.reference = std::make_unique<FileReference>(reference_dir, options.fsync);
        report.largest_file_bytes = 2 * most_bytes;
        break;
      }
      case StorageBackendKind::kRedis: {
        HIQ_ASSIGN_OR_RETURN(const RedisServerInfo info, probe_redis_server(options.redis));
        report.redis_version = info.version;
        HIQ_ASSIGN_OR_RETURN(b.backend, make_redis_backend(options.redis));
        HIQ_ASSIGN_OR_RETURN(RedisContext context, connect_redis(options.redis));
        b.reference = std::make_unique<RedisReference>(std::move(context), options.redis.key_prefix, options.batch);
        break;
      }
      case StorageBackendKind::kNone: break;
    }
    under_test.push_back(std::move(b));
  }

  for (Workload& w : workloads) {
    const std::string codec(codec_name(w.codec));
    say(codec + ": encoding " + std::to_string(w.keys.size()) + " values of " + format_bytes(w.value_bytes()));
    make_values(w, options.block_tokens, options.seed);
    for (BackendUnderTest& b : under_test) {
      const std::string what = codec + " " + std::string(storage_backend_name(b.kind));
      StorageBenchRow row;
      row.backend = b.kind;
      row.codec = w.codec;
      row.values = w.keys.size();
      row.value_bytes = w.value_bytes();
      row.payload_bytes = w.payload_bytes;
      row.bytes_per_token = w.bytes_per_token;
      row.encode_s = w.encode_s;
      const WrittenKeys cleanup(*b.backend, *b.reference, w);
      HIQ_RETURN_IF_ERROR(b.reference->prepare(w).with_context(what));
      std::vector<double> write, raw_write, read, raw_read, decode;
      for (int r = 0; r < options.repeats; ++r) {
        say(what + ": write " + std::to_string(r + 1) + "/" + std::to_string(options.repeats));
        HIQ_RETURN_IF_ERROR(b.backend->remove(w.keys).with_context(what));
        auto start = Clock::now();
        HIQ_RETURN_IF_ERROR(backend_write(*b.backend, w, options.batch).with_context(what + ": write"));
        write.push_back(seconds_since(start));
        HIQ_RETURN_IF_ERROR(b.reference->clear(w).with_context(what));
        start = Clock::now();
        HIQ_RETURN_IF_ERROR(b.reference->write(w).with_context(what));
        raw_write.push_back(seconds_since(start));
      }
      for (int r = 0; r < options.repeats; ++r) {
        say(what + ": read " + std::to_string(r + 1) + "/" + std::to_string(options.repeats));
        double decode_s = 0;
        auto start = Clock::now();
        HIQ_RETURN_IF_ERROR(backend_read(*b.backend, w, options.batch, decode_s).with_context(what + ": read"));
        read.push_back(seconds_since(start));
        decode.push_back(decode_s);
        start = Clock::now();
        HIQ_RETURN_IF_ERROR(b.reference->read(w).with_context(what));
        raw_read.push_back(seconds_since(start));
      }
      row.write_s = median(write);
      row.raw_write_s = median(raw_write);
      row.read_s = median(read);
      row.raw_read_s = median(raw_read);
      row.decode_s = median(decode);
      report.rows.push_back(row);
    }
    w.values = {};  // the next codec's values take their place
  }
  return report;
}

}  // namespace hiq
