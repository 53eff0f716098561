// The storage backends. One body runs against memory, file and Redis
// (exists counts the run from the first key, get returns values as set,
// replacement, removal, many threads at once); then what only one backend
// has: the file backend's restart, LRU on disk, full disks and short writes
// that leave nothing readable, corrupt files; Redis killed and restarted
// under the backend, and two fingerprints in one Redis.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "expect_error.h"
#include "redis_server.h"
#include "storage/file_backend.h"
#include "storage/redis_backend.h"
#include "storage/storage_backend.h"
#include "storage/storage_engine.h"
#include "storage/storage_value.h"
#include "storage_test_util.h"

namespace hiq {
namespace {

namespace fs = std::filesystem;
using testing::encoded_pages;
using testing::payload;
using testing::prompt;
using testing::small_fingerprint;
using testing::StorageTempDir;

constexpr size_t kPage = 768;  // small_fingerprint()'s payload bytes

std::vector<StorageKey> keys_of(size_t blocks, uint32_t seed) {
  return storage_keys(small_fingerprint(), prompt(4 * blocks, seed));
}

// Every regular file under `dir` whose name ends with `suffix`.
std::vector<fs::path> files_under(const fs::path& dir, std::string_view suffix) {
  std::vector<fs::path> out;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().filename().string().ends_with(suffix)) out.push_back(entry.path());
  return out;
}

// ---- one body, every backend ----------------------------------------------------------

enum class Kind { kMemory, kFile, kRedis };
const char* kind_name(Kind kind) { return kind == Kind::kMemory ? "memory" : kind == Kind::kFile ? "file" : "redis"; }
void PrintTo(Kind kind, std::ostream* os) { *os << kind_name(kind); }

class StorageBackends : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    switch (GetParam()) {
      case Kind::kMemory: backend_ = std::move(*make_memory_backend(64 << 20)); break;
      case Kind::kFile: {
        FileBackendOptions options;
        options.path = (dir_.path() / "kv").string();
        options.capacity_bytes = 64 << 20;
        backend_ = std::move(*make_file_backend(options));
        break;
      }
      case Kind::kRedis: {
        const std::string binary = testing::find_redis_server();
        if (binary.empty()) GTEST_SKIP() << "redis-server is not installed (scripts/bootstrap installs it)";
        redis_ = std::make_unique<testing::RedisServer>(binary, dir_.path() / "redis");
        ASSERT_TRUE(redis_->start()) << "redis-server did not start; see " << (dir_.path() / "redis/redis.log");
        RedisBackendOptions options;
        options.port = redis_->port();
        options.key_prefix = "test:";
        backend_ = std::move(*make_redis_backend(options));
        break;
      }
    }
  }

  StorageTempDir dir_;
  std::unique_ptr<testing::RedisServer> redis_;
  std::unique_ptr<StorageBackend> backend_;
};

TEST_P(StorageBackends, GetReturnsTheValuesAsSetAndEmptyForMissing) {
  const auto keys = keys_of(6, 1);
  const auto values = encoded_pages(small_fingerprint(), keys, kPage, 100);
  ASSERT_TRUE(backend_->set(std::span(keys).first(4), std::span(values).first(4)).is_ok());
  auto got = backend_->get(keys);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  ASSERT_EQ(got->size(), 6u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ((*got)[i], values[i]) << i;
  EXPECT_TRUE((*got)[4].empty());
  EXPECT_TRUE((*got)[5].empty());
  EXPECT_TRUE(backend_->get({})->empty());

  // A value of a few megabytes (a Qwen3-8B page in int8 is 4.8 MB), bytes of every value.
  std::vector<std::byte> big = payload(5 << 20, 7);
  for (size_t i = 0; i < 256; ++i) big[i] = static_cast<std::byte>(i);
  const auto big_key = keys_of(1, 99);
  ASSERT_TRUE(backend_->set(big_key, std::vector<std::vector<std::byte>>{big}).is_ok());
  EXPECT_EQ((*backend_->get(big_key))[0], big);
}

TEST_P(StorageBackends, ExistsCountsTheRunFromTheFirstKey) {
  const auto keys = keys_of(6, 2);
  const auto values = encoded_pages(small_fingerprint(), keys, kPage, 200);
  const std::vector<StorageKey> stored = {keys[0], keys[1], keys[2], keys[4]};
  const std::vector<std::vector<std::byte>> stored_values = {values[0], values[1], values[2], values[4]};
  ASSERT_TRUE(backend_->set(stored, stored_values).is_ok());
  EXPECT_EQ(*backend_->exists(keys), 3u);
  EXPECT_EQ(*backend_->exists(std::span(keys).subspan(3)), 0u);
  EXPECT_EQ(*backend_->exists(std::span(keys).subspan(4, 1)), 1u);
  EXPECT_EQ(*backend_->exists({}), 0u);
}

TEST_P(StorageBackends, SetReplacesAndRemoveDrops) {
  const auto keys = keys_of(3, 3);
  const auto first = encoded_pages(small_fingerprint(), keys, kPage, 300);
  const auto second = encoded_pages(small_fingerprint(), keys, kPage, 400);
  ASSERT_TRUE(backend_->set(keys, first).is_ok());
  ASSERT_TRUE(backend_->set(std::span(keys).first(1), std::span(second).first(1)).is_ok());
  auto got = *backend_->get(keys);
  EXPECT_EQ(got[0], second[0]);
  EXPECT_EQ(got[1], first[1]);
  ASSERT_TRUE(backend_->remove(std::span(keys).subspan(1, 1)).is_ok());
  ASSERT_TRUE(backend_->remove(keys_of(2, 77)).is_ok());  // not held: ignored
  EXPECT_EQ(*backend_->exists(keys), 1u);
  EXPECT_TRUE((*backend_->get(keys))[1].empty());
  EXPECT_EQ((*backend_->get(keys))[2], first[2]);
}

TEST_P(StorageBackends, RefusesMismatchedBatchesAndEmptyValues) {
  const auto keys = keys_of(2, 4);
  const auto values = encoded_pages(small_fingerprint(), keys, kPage, 500);
  EXPECT_EQ(backend_->set(keys, std::span(values).first(1)).code(), StatusCode::kInvalidArgument);
  const std::vector<std::vector<std::byte>> empty(2);
  EXPECT_EQ(backend_->set(keys, empty).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*backend_->exists(keys), 0u);
}

TEST_P(StorageBackends, ManyThreadsAtOnce) {
  constexpr int kThreads = 4, kRounds = 40;
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        // Threads share half their keys (same prompt seed), so they write and read the same files.
        const auto keys = keys_of(4, static_cast<uint32_t>(r % 2 == 0 ? r : 1000 * t + r));
        const auto values = encoded_pages(small_fingerprint(), keys, kPage, 7);  // same bytes whoever writes
        if (!backend_->set(keys, values).is_ok()) ++failed;
        auto got = backend_->get(keys);
        if (!got.is_ok()) {
          ++failed;
          continue;
        }
        for (size_t i = 0; i < keys.size(); ++i)
          if ((*got)[i] != values[i]) ++wrong;
        if (!backend_->exists(keys).is_ok()) ++failed;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Storage, StorageBackends, ::testing::Values(Kind::kMemory, Kind::kFile, Kind::kRedis),
                         [](const ::testing::TestParamInfo<Kind>& param) { return std::string(kind_name(param.param)); });

// ---- memory --------------------------------------------------------------------------

TEST(StorageMemoryBackend, EvictsLeastRecentlyReadAndRefusesAValueLargerThanItAll) {
  const auto keys = keys_of(4, 5);
  const auto values = encoded_pages(small_fingerprint(), keys, kPage, 600);
  auto backend = std::move(*make_memory_backend(3 * values[0].size()));
  ASSERT_TRUE(backend->set(std::span(keys).first(3), std::span(values).first(3)).is_ok());
  ASSERT_FALSE((*backend->get(std::span(keys).first(1)))[0].empty());  // A read: B is now the oldest
  ASSERT_TRUE(backend->set(std::span(keys).subspan(3), std::span(values).subspan(3)).is_ok());
  const auto got = *backend->get(keys);
  EXPECT_FALSE(got[0].empty());
  EXPECT_TRUE(got[1].empty());
  EXPECT_FALSE(got[2].empty());
  EXPECT_FALSE(got[3].empty());
  EXPECT_EQ(backend->set(std::span(keys).first(1), std::vector<std::vector<std::byte>>{payload(4 * values[0].size(), 1)}).code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(make_memory_backend(0).status().code(), StatusCode::kInvalidArgument);
}

// ---- file ----------------------------------------------------------------------------

class StorageFileBackend : public ::testing::Test {
 protected:
  FileBackendOptions options(size_t capacity_bytes, std::shared_ptr<FileOps> ops = nullptr) const {
    FileBackendOptions o;
    o.path = root().string();
    o.capacity_bytes = capacity_bytes;
    o.ops = std::move(ops);
    return o;
  }
  fs::path root() const { return dir_.path() / "kv"; }
  std::unique_ptr<StorageBackend> open(size_t capacity_bytes, std::shared_ptr<FileOps> ops = nullptr) const {
    auto backend = make_file_backend(options(capacity_bytes, std::move(ops)));
    EXPECT_TRUE(backend.is_ok()) << backend.status().to_string();
    return backend.is_ok() ? std::move(*backend) : nullptr;
  }

  StorageTempDir dir_;
  const StorageFingerprint fp_ = small_fingerprint();
};

TEST_F(StorageFileBackend, OneFilePerKeyUnderItsPrefix) {
  auto backend = open(1 << 20);
  const auto keys = keys_of(2, 6);
  ASSERT_TRUE(backend->set(keys, encoded_pages(fp_, keys, kPage, 1)).is_ok());
  for (const StorageKey& key : keys) {
    const fs::path path = file_backend_path(root().string(), key);
    EXPECT_EQ(path, root() / key.hex().substr(0, 2) / (key.hex() + ".kv"));
    EXPECT_EQ(fs::file_size(path), kStorageHeaderBytes + kPage);
  }
  EXPECT_TRUE(files_under(root(), ".tmp").empty());
}

TEST_F(StorageFileBackend, ARestartFindsTheValues) {
  const auto keys = keys_of(5, 7);
  const auto values = encoded_pages(fp_, keys, kPage, 700);
  {
    auto backend = open(1 << 20);
    ASSERT_TRUE(backend->set(keys, values).is_ok());
  }
  auto backend = open(1 << 20);
  EXPECT_EQ(*backend->exists(keys), 5u);
  EXPECT_EQ(*backend->get(keys), values);
}

TEST_F(StorageFileBackend, StartupDeletesTemporaryFilesAndLeavesStrangers) {
  fs::create_directories(root() / "ab");
  std::ofstream(root() / "ab" / "abcdef.1234.0.tmp") << "half a value";
  std::ofstream(root() / "ab" / "README") << "not ours";
  std::ofstream(root() / "ab" / "zz.kv") << "not a key";
  auto backend = open(1 << 20);
  EXPECT_FALSE(fs::exists(root() / "ab" / "abcdef.1234.0.tmp"));
  EXPECT_TRUE(fs::exists(root() / "ab" / "README"));
  EXPECT_TRUE(fs::exists(root() / "ab" / "zz.kv"));
}

TEST_F(StorageFileBackend, EvictionKeepsTheMostRecentlyRead) {
  const auto keys = keys_of(4, 8);
  const auto values = encoded_pages(fp_, keys, kPage, 800);
  auto backend = open(3 * values[0].size());
  ASSERT_TRUE(backend->set(std::span(keys).first(3), std::span(values).first(3)).is_ok());  // A, B, C
  ASSERT_EQ((*backend->get(std::span(keys).first(1)))[0], values[0]);                        // read A
  ASSERT_TRUE(backend->set(std::span(keys).subspan(3), std::span(values).subspan(3)).is_ok());  // D evicts B
  EXPECT_TRUE(fs::exists(file_backend_path(root().string(), keys[0])));
  EXPECT_FALSE(fs::exists(file_backend_path(root().string(), keys[1])));
  EXPECT_TRUE(fs::exists(file_backend_path(root().string(), keys[2])));
  EXPECT_TRUE(fs::exists(file_backend_path(root().string(), keys[3])));
  EXPECT_EQ(files_under(root(), ".kv").size(), 3u);
  EXPECT_EQ(*backend->exists(keys), 1u);
  EXPECT_EQ(backend->set(std::span(keys).first(1), std::vector<std::vector<std::byte>>{payload(4 * values[0].size(), 1)}).code(),
            StatusCode::kResourceExhausted);
}

TEST_F(StorageFileBackend, ARestartEvictsInModificationTimeOrder) {
  const auto keys = keys_of(4, 9);
  const auto values = encoded_pages(fp_, keys, kPage, 900);
  {
    auto backend = open(1 << 20);
    ASSERT_TRUE(backend->set(keys, values).is_ok());
  }
  // mtimes: B oldest, then D, A, C (a read refreshes them; set them apart here).
  const int order[4] = {2, 0, 3, 1};
  for (size_t i = 0; i < 4; ++i) {
    const timespec times[2] = {{0, UTIME_OMIT}, {1'000'000 + 100 * order[i], 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, file_backend_path(root().string(), keys[i]).c_str(), times, 0), 0);
  }
  auto backend = open(2 * values[0].size());  // smaller now: the two oldest go at start
  EXPECT_FALSE(fs::exists(file_backend_path(root().string(), keys[1])));
  EXPECT_FALSE(fs::exists(file_backend_path(root().string(), keys[3])));
  EXPECT_TRUE(fs::exists(file_backend_path(root().string(), keys[0])));
  EXPECT_TRUE(fs::exists(file_backend_path(root().string(), keys[2])));
}

TEST_F(StorageFileBackend, AReadRefreshesTheModificationTime) {
  const auto keys = keys_of(1, 10);
  auto backend = open(1 << 20);
  ASSERT_TRUE(backend->set(keys, encoded_pages(fp_, keys, kPage, 1)).is_ok());
  const std::string path = file_backend_path(root().string(), keys[0]);
  const timespec old_times[2] = {{0, UTIME_OMIT}, {1'000'000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), old_times, 0), 0);
  ASSERT_FALSE((*backend->get(keys))[0].empty());
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_GT(st.st_mtim.tv_sec, 1'000'000);
}

TEST_F(StorageFileBackend, AnotherProcessesValuesAreFound) {
  auto reader = open(1 << 20);  // started before the writer wrote
  auto writer = open(1 << 20);
  const auto keys = keys_of(3, 11);
  const auto values = encoded_pages(fp_, keys, kPage, 1100);
  ASSERT_TRUE(writer->set(keys, values).is_ok());
  EXPECT_EQ(*reader->exists(keys), 3u);
  EXPECT_EQ(*reader->get(keys), values);
}

// Simulates a disk that fills after `room` bytes: the write that crosses it
// is short, the next one fails with `error` (or returns 0 when error is 0).
class FullDisk : public FileOps {
 public:
  FullDisk(size_t room, int error) : room_(room), error_(error) {}
  ssize_t write(int fd, const void* buffer, size_t bytes) override {
    if (room_ == 0) {
      ++refused_;
      if (error_ == 0) return 0;
      errno = error_;
      return -1;
    }
    const size_t n = std::min(bytes, room_);
    room_ -= n;
    return FileOps::write(fd, buffer, n);
  }
  void make_room(size_t room) { room_ = room; }
  int refused() const { return refused_; }

 private:
  size_t room_;
  int error_;
  int refused_ = 0;
};

TEST_F(StorageFileBackend, AFullDiskOrAShortWriteLeavesNothingReadableAndIsCounted) {
  struct Case {
    const char* name;
    int error;
    const char* message;
  };
  for (const Case& c : {Case{"ENOSPC", ENOSPC, "disk full"}, Case{"EDQUOT", EDQUOT, "disk full"},
                        Case{"short write", 0, "short write"}}) {
    SCOPED_TRACE(c.name);
    fs::remove_all(root());
    const auto keys = keys_of(3, 12);
    const auto old_values = encoded_pages(fp_, keys, kPage, 1200);
    const auto new_values = encoded_pages(fp_, keys, kPage, 1300);
    auto disk = std::make_shared<FullDisk>(size_t{1} << 30, c.error);
    StorageEngine engine(open(1 << 20, disk), 1);
    // keys[0] holds an old value; then the disk fills in the middle of the new one.
    ASSERT_TRUE(engine.wait(engine.submit_set({keys[0]}, {old_values[0]})).status.is_ok());
    disk->make_room(100);
    const auto done = engine.wait(engine.submit_set(keys, new_values));
    EXPECT_EQ(done.status.code(), StatusCode::kResourceExhausted) << done.status.to_string();
    EXPECT_TRUE(testing::contains(done.status.message(), c.message)) << done.status.message();
    EXPECT_EQ(done.hits, 0u);
    EXPECT_EQ(disk->refused(), 1);
    EXPECT_EQ(engine.stats().errors(), 1u);
    EXPECT_EQ(engine.stats().set_blocks, 1u);  // the old value only
    // Nothing partial anywhere: no temporary file, the old value intact, the others absent.
    EXPECT_TRUE(files_under(root(), ".tmp").empty());
    EXPECT_EQ(files_under(root(), ".kv").size(), 1u);
    const auto got = engine.wait(engine.submit_get(keys, fp_, kPage));
    ASSERT_TRUE(got.status.is_ok());
    ASSERT_EQ(got.hits, 1u);
    EXPECT_EQ(got.payloads[0], payload(kPage, 1200));
    EXPECT_EQ(engine.stats().corrupt_values, 0u);
  }
}

// Other failures of the write path (fsync, close, rename) leave nothing either.
class FailingCall : public FileOps {
 public:
  explicit FailingCall(std::string which) : which_(std::move(which)) {}
  int fsync(int fd) override { return which_ == "fsync" ? fail(EIO) : FileOps::fsync(fd); }
  int close(int fd) override {
    const int r = FileOps::close(fd);
    return which_ == "close" ? fail(EIO) : r;
  }
  int rename(const char* from, const char* to) override {
    return which_ == "rename" ? fail(EXDEV) : FileOps::rename(from, to);
  }

 private:
  static int fail(int error) {
    errno = error;
    return -1;
  }
  std::string which_;
};

TEST_F(StorageFileBackend, FailedFsyncCloseOrRenameLeaveNothing) {
  for (const char* which : {"fsync", "close", "rename"}) {
    SCOPED_TRACE(which);
    fs::remove_all(root());
    FileBackendOptions o = options(1 << 20, std::make_shared<FailingCall>(which));
    o.fsync = true;
    auto backend = std::move(*make_file_backend(o));
    const auto keys = keys_of(2, 13);
    const Status st = backend->set(keys, encoded_pages(fp_, keys, kPage, 1));
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();
    EXPECT_TRUE(testing::contains(st.message(), which)) << st.message();
    EXPECT_TRUE(files_under(root(), ".tmp").empty());
    EXPECT_TRUE(files_under(root(), ".kv").empty());
    EXPECT_EQ(*backend->exists(keys), 0u);
  }
}

TEST_F(StorageFileBackend, ACorruptOrTruncatedFileIsAMissCountedAsCorrupt) {
  const auto keys = keys_of(3, 14);
  testing::CapturedLog log;
  StorageEngine engine(open(1 << 20), 1);
  ASSERT_TRUE(engine.wait(engine.submit_set(keys, encoded_pages(fp_, keys, kPage, 1400))).status.is_ok());

  const std::string second = file_backend_path(root().string(), keys[1]);
  {
    std::fstream f(second, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(300);
    f.put('\x5a');
  }
  auto got = engine.wait(engine.submit_get(keys, fp_, kPage));
  ASSERT_TRUE(got.status.is_ok());
  EXPECT_EQ(got.hits, 1u);
  ASSERT_EQ(got.payloads.size(), 1u);
  EXPECT_EQ(got.payloads[0], payload(kPage, 1400));
  EXPECT_EQ(engine.stats().corrupt_values, 1u);
  EXPECT_EQ(engine.stats().hit_blocks, 1u);
  EXPECT_EQ(engine.stats().miss_blocks, 2u);
  EXPECT_FALSE(fs::exists(second)) << "the corrupt value is removed, to be stored anew";

  fs::resize_file(file_backend_path(root().string(), keys[0]), 100);
  got = engine.wait(engine.submit_get(keys, fp_, kPage));
  EXPECT_EQ(got.hits, 0u);
  EXPECT_EQ(engine.stats().corrupt_values, 2u);
  EXPECT_EQ(engine.stats().errors(), 0u);
  EXPECT_EQ(log.count("payload checksum mismatch"), 1u);
  EXPECT_EQ(log.count("header says 768 payload bytes, the value holds 36"), 1u);
}

TEST_F(StorageFileBackend, OptionsAreChecked) {
  EXPECT_EQ(make_file_backend(options(0)).status().code(), StatusCode::kInvalidArgument);
  FileBackendOptions no_path = options(1 << 20);
  no_path.path.clear();
  EXPECT_EQ(make_file_backend(no_path).status().code(), StatusCode::kInvalidArgument);
  std::ofstream(dir_.path() / "a-file") << "x";
  FileBackendOptions under_a_file = options(1 << 20);
  under_a_file.path = (dir_.path() / "a-file" / "kv").string();
  EXPECT_EQ(make_file_backend(under_a_file).status().code(), StatusCode::kUnavailable);
}

// ---- redis ---------------------------------------------------------------------------

class StorageRedisBackend : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string binary = testing::find_redis_server();
    if (binary.empty()) GTEST_SKIP() << "redis-server is not installed (scripts/bootstrap installs it)";
    redis_ = std::make_unique<testing::RedisServer>(binary, dir_.path() / "redis");
    ASSERT_TRUE(redis_->start()) << "redis-server did not start";
  }
  RedisBackendOptions options() const {
    RedisBackendOptions o;
    o.port = redis_->port();
    o.connect_timeout_ms = 200;
    o.command_timeout_ms = 1000;
    o.reconnect_initial_ms = 20;
    o.reconnect_max_ms = 200;
    return o;
  }

  StorageTempDir dir_;
  std::unique_ptr<testing::RedisServer> redis_;
  const StorageFingerprint fp_ = small_fingerprint();
};

TEST_F(StorageRedisBackend, AKilledServerFailsCallsFastAndIsReconnectedWhenBack) {
  StorageEngine engine(std::move(*make_redis_backend(options())), 2);
  const auto keys = keys_of(3, 15);
  const auto values = encoded_pages(fp_, keys, kPage, 1500);
  ASSERT_TRUE(engine.wait(engine.submit_set(keys, values)).status.is_ok());
  ASSERT_EQ(engine.wait(engine.submit_exists(keys)).hits, 3u);

  redis_->kill();  // SIGKILL, mid-run: the pooled connections are now dead
  constexpr int kCalls = 30;
  for (int i = 0; i < kCalls; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const auto done = engine.wait(i % 3 == 0   ? engine.submit_get(keys, fp_, kPage)
                                  : i % 3 == 1 ? engine.submit_exists(keys)
                                               : engine.submit_set(keys, values));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(done.status.code(), StatusCode::kUnavailable) << done.status.to_string();
    EXPECT_EQ(done.hits, 0u);
    EXPECT_TRUE(done.payloads.empty());
    EXPECT_LT(seconds, 0.5) << "call " << i << " took " << seconds << " s";
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(engine.stats().errors(), uint64_t{kCalls});

  ASSERT_TRUE(redis_->start(redis_->port())) << "could not restart redis-server on the same port";
  bool back = false;
  for (int i = 0; i < 300 && !back; ++i) {  // the pause is at most 200 ms
    back = engine.wait(engine.submit_set(keys, values)).status.is_ok();
    if (!back) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(back) << "the backend did not reconnect";
  const auto got = engine.wait(engine.submit_get(keys, fp_, kPage));
  ASSERT_TRUE(got.status.is_ok()) << got.status.to_string();
  EXPECT_EQ(got.hits, 3u);
  EXPECT_EQ(got.payloads[2], payload(kPage, 1502));
}

// Redis restarted while the pool's connections sat idle: the first call finds
// its connection dead and is retried once on a new one, so no error is seen.
TEST_F(StorageRedisBackend, ARestartWhileIdleCostsNoError) {
  StorageEngine engine(std::move(*make_redis_backend(options())), 1);
  const auto keys = keys_of(2, 19);
  const auto values = encoded_pages(fp_, keys, kPage, 1900);
  ASSERT_TRUE(engine.wait(engine.submit_set(keys, values)).status.is_ok());  // a connection is now pooled
  redis_->kill();
  ASSERT_TRUE(redis_->start(redis_->port()));
  const auto set = engine.wait(engine.submit_set(keys, values));
  EXPECT_TRUE(set.status.is_ok()) << set.status.to_string();
  EXPECT_EQ(engine.wait(engine.submit_get(keys, fp_, kPage)).hits, 2u);
  EXPECT_EQ(engine.stats().errors(), 0u);
}

TEST_F(StorageRedisBackend, AnUnreachableServerFailsFastFromTheStart) {
  RedisBackendOptions o = options();
  o.port = testing::free_loopback_port();  // nothing listens there
  o.reconnect_initial_ms = 2000;           // so every later call falls inside the pause
  o.reconnect_max_ms = 4000;
  auto backend = std::move(*make_redis_backend(o));
  const auto keys = keys_of(2, 16);
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    auto held = backend->exists(keys);
    EXPECT_EQ(held.status().code(), StatusCode::kUnavailable);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 0.5);
    if (i >= 1) {
      EXPECT_TRUE(testing::contains(held.status().message(), "next attempt in")) << held.status().message();
    }
  }
}

TEST_F(StorageRedisBackend, TwoFingerprintsInOneRedisStayApart) {
  StorageEngine engine(std::move(*make_redis_backend(options())), 2);
  const StorageFingerprint int8 = fp_;
  const StorageFingerprint fp8 = small_fingerprint("fp8");  // same payload size, other meaning
  const std::vector<int32_t> tokens = prompt(16, 17);  // one prompt, both servers
  const auto keys8 = storage_keys(int8, tokens), keys_fp8 = storage_keys(fp8, tokens);
  ASSERT_TRUE(engine.wait(engine.submit_set(keys8, encoded_pages(int8, keys8, kPage, 1700))).status.is_ok());
  EXPECT_EQ(engine.wait(engine.submit_exists(keys_fp8)).hits, 0u);
  EXPECT_EQ(engine.wait(engine.submit_get(keys_fp8, fp8, kPage)).hits, 0u);
  ASSERT_TRUE(engine.wait(engine.submit_set(keys_fp8, encoded_pages(fp8, keys_fp8, kPage, 1800))).status.is_ok());

  const auto a = engine.wait(engine.submit_get(keys8, int8, kPage));
  const auto b = engine.wait(engine.submit_get(keys_fp8, fp8, kPage));
  ASSERT_EQ(a.hits, 4u);
  ASSERT_EQ(b.hits, 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(a.payloads[i], payload(kPage, 1700 + static_cast<uint32_t>(i)));
    EXPECT_EQ(b.payloads[i], payload(kPage, 1800 + static_cast<uint32_t>(i)));
  }
  EXPECT_EQ(engine.stats().corrupt_values, 0u);
}

TEST_F(StorageRedisBackend, KeysCarryThePrefixAndValuesCanExpire) {
  RedisBackendOptions o = options();
  o.key_prefix = "tenant-a:";
  o.ttl_seconds = 1;
  auto backend = std::move(*make_redis_backend(o));
  RedisBackendOptions other = options();
  other.key_prefix = "tenant-b:";
  auto neighbour = std::move(*make_redis_backend(other));
  const auto keys = keys_of(2, 18);
  ASSERT_TRUE(backend->set(keys, encoded_pages(fp_, keys, kPage, 1)).is_ok());
  EXPECT_EQ(*backend->exists(keys), 2u);
  EXPECT_EQ(*neighbour->exists(keys), 0u);

  redisContext* c = redisConnect("127.0.0.1", redis_->port());
  ASSERT_TRUE(c != nullptr && c->err == 0);
  auto* ttl = static_cast<redisReply*>(redisCommand(c, "PTTL %s", ("tenant-a:" + keys[0].hex()).c_str()));
  ASSERT_NE(ttl, nullptr);
  EXPECT_EQ(ttl->type, REDIS_REPLY_INTEGER);
  EXPECT_GT(ttl->integer, 0);
  EXPECT_LE(ttl->integer, 1000);
  freeReplyObject(ttl);
  redisFree(c);
}

TEST_F(StorageRedisBackend, OptionsAreChecked) {
  RedisBackendOptions o = options();
  o.port = 0;
  EXPECT_EQ(make_redis_backend(o).status().code(), StatusCode::kInvalidArgument);
  o = options();
  o.connections = 0;
  EXPECT_EQ(make_redis_backend(o).status().code(), StatusCode::kInvalidArgument);
  o = options();
  o.host.clear();
  EXPECT_EQ(make_redis_backend(o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace hiq
