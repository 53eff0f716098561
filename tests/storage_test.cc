// Storage keys, values and options: keys chain over whole blocks (a prefix's
// keys begin a longer prompt's; one changed token changes its block's key and
// every later one; fingerprints never share keys); a value decodes only to its
// own payload, whatever bytes are flipped, cut or appended; the three flags
// parse into validated options with errors that name the setting.
#include <gtest/gtest.h>

#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <unordered_set>

#include "expect_error.h"
#include "kv/model_config.h"
#include "memory/host_kv_pool.h"
#include "storage/storage_key.h"
#include "storage/storage_options.h"
#include "storage/storage_value.h"
#include "storage_test_util.h"

namespace hiq {
namespace {

using testing::expect_error;
using testing::payload;
using testing::prompt;
using testing::small_fingerprint;

// ---- keys ------------------------------------------------------------------------

TEST(StorageKeys, OnlyWholeBlocksHaveKeys) {
  const StorageFingerprint fp = small_fingerprint();  // 4 tokens a block
  EXPECT_TRUE(storage_keys(fp, prompt(3, 1)).empty());
  EXPECT_EQ(storage_keys(fp, prompt(4, 1)).size(), 1u);
  EXPECT_EQ(storage_keys(fp, prompt(103, 1)).size(), 25u);
}

TEST(StorageKeys, APrefixsKeysAreTheFirstKeysOfALongerPrompt) {
  const StorageFingerprint fp = small_fingerprint();
  const std::vector<int32_t> tokens = prompt(200, 7);
  const std::vector<StorageKey> all = storage_keys(fp, tokens);
  for (size_t n : {4u, 5u, 40u, 42u, 199u}) {
    const auto prefix = storage_keys(fp, std::span(tokens).first(n));
    ASSERT_EQ(prefix.size(), n / 4);
    for (size_t i = 0; i < prefix.size(); ++i) EXPECT_EQ(prefix[i], all[i]) << "n=" << n << " block " << i;
  }
  EXPECT_EQ(storage_keys(fp, tokens), all);  // deterministic
}

TEST(StorageKeys, ChangingATokenChangesItsBlockAndEveryLaterKey) {
  const StorageFingerprint fp = small_fingerprint();
  const std::vector<int32_t> tokens = prompt(64, 3);
  const std::vector<StorageKey> base = storage_keys(fp, tokens);
  for (size_t p = 0; p < tokens.size(); ++p) {
    std::vector<int32_t> changed = tokens;
    changed[p] ^= 1;
    const std::vector<StorageKey> keys = storage_keys(fp, changed);
    const size_t block = p / 4;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i < block) EXPECT_EQ(keys[i], base[i]) << "token " << p << " block " << i;
      else EXPECT_NE(keys[i], base[i]) << "token " << p << " block " << i;
    }
  }
  // Swapping two tokens inside one block changes it too (ids are positional).
  std::vector<int32_t> swapped = tokens;
  std::swap(swapped[0], swapped[1]);
  EXPECT_NE(storage_keys(fp, swapped)[0], base[0]);
}

TEST(StorageKeys, DifferentFingerprintsNeverShareAKey) {
  const StorageFingerprint base = small_fingerprint();
  std::vector<StorageFingerprint> variants;
  auto vary = [&](auto change) {
    StorageFingerprint fp = base;
    change(fp);
    variants.push_back(fp);
  };
  vary([](StorageFingerprint& f) { f.model = "test-model-sha256:0124"; });
  vary([](StorageFingerprint& f) { f.codec = "int4"; });
  vary([](StorageFingerprint& f) { f.format_version += 1; });
  vary([](StorageFingerprint& f) { f.layers += 1; });
  vary([](StorageFingerprint& f) { f.kv_heads += 1; });
  vary([](StorageFingerprint& f) { f.head_dim += 16; });
  vary([](StorageFingerprint& f) { f.v_head_dim = 0; });
  vary([](StorageFingerprint& f) { f.tp_size = 2; });
  vary([](StorageFingerprint& f) { f.tp_size = 2, f.tp_rank = 1; });
  vary([](StorageFingerprint& f) { f.block_tokens = 8; });
  vary([](StorageFingerprint& f) { f.record_align = 128; });
  vary([](StorageFingerprint& f) { f.l1_dtype = "fp16"; });

  const std::vector<int32_t> tokens = prompt(128, 11);
  std::unordered_set<StorageKey> seen;
  std::set<uint64_t> hashes;
  for (const StorageFingerprint& fp : variants) {
    EXPECT_TRUE(fp.validate().is_ok()) << fp.describe();
    EXPECT_TRUE(hashes.insert(fp.hash()).second) << fp.describe();
    for (const StorageKey& key : storage_keys(fp, tokens)) EXPECT_TRUE(seen.insert(key).second) << fp.describe();
  }
  EXPECT_FALSE(hashes.contains(base.hash()));
  for (const StorageKey& key : storage_keys(base, tokens)) EXPECT_FALSE(seen.contains(key));
}

// Keys outlive processes and builds: a change to the serialisation or the
// hash must be deliberate (and bump kStorageValueVersion). The figures pin
// what this implementation computed when it was written.
TEST(StorageKeys, KnownAnswer) {
  const StorageFingerprint fp = small_fingerprint();
  const std::vector<int32_t> tokens = {0, 1, 2, 3, 151935, -1, 7, 42};
  const auto keys = storage_keys(fp, tokens);
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0].hex(), "e49a039f625d8a09d7029b6be28a5625");
  EXPECT_EQ(keys[1].hex(), "c38a1c68f38437a2f610cbc7fb51742b");
  EXPECT_EQ(fp.hash(), uint64_t{11671877098257075214u});
}

TEST(StorageKeys, HexNamesAndHashing) {
  const auto keys = storage_keys(small_fingerprint(), prompt(400, 5));
  std::unordered_set<StorageKey> set(keys.begin(), keys.end());
  EXPECT_EQ(set.size(), keys.size());
  for (const StorageKey& key : keys) {
    const std::string hex = key.hex();
    ASSERT_EQ(hex.size(), 32u);
    EXPECT_EQ(hex.find_first_not_of("0123456789abcdef"), std::string::npos) << hex;
  }
  StorageKey zero;
  EXPECT_EQ(zero.hex(), std::string(32, '0'));
}

TEST(StorageFingerprints, ValidateNamesTheField) {
  auto with = [](auto change) {
    StorageFingerprint fp = small_fingerprint();
    change(fp);
    return fp.validate();
  };
  EXPECT_TRUE(small_fingerprint().validate().is_ok());
  EXPECT_TRUE(testing::contains(with([](auto& f) { f.model.clear(); }).message(), "model"));
  EXPECT_TRUE(testing::contains(with([](auto& f) { f.codec.clear(); }).message(), "codec"));
  EXPECT_TRUE(testing::contains(with([](auto& f) { f.layers = 0; }).message(), "layers"));
  EXPECT_TRUE(testing::contains(with([](auto& f) { f.v_head_dim = -1; }).message(), "v_head_dim"));
  EXPECT_TRUE(testing::contains(with([](auto& f) { f.tp_rank = 1; }).message(), "tp_rank 1"));
  EXPECT_TRUE(testing::contains(with([](auto& f) { f.block_tokens = 0; }).message(), "block_tokens"));
  EXPECT_EQ(with([](auto& f) { f.record_align = 0; }).code(), StatusCode::kInvalidArgument);
}

// A page's payload is what a HostKvPool of the same geometry holds for its tokens.
TEST(StorageFingerprints, PageBytesMatchTheHostPool) {
  for (const char* model : {"qwen3-8b", "deepseek-v2-lite"}) {
    const KvGeometry geometry = *resolve_model_geometry(model);
    for (CodecKind codec : kAllCodecs) {
      for (size_t align : {size_t{16}, size_t{128}}) {
        HostKvPoolOptions options;
        options.codec = codec;
        options.record_align = align;
        options.capacity_tokens = 64;
        options.populate = false;
        auto pool = HostKvPool::create(geometry, options, 64);
        if (!pool.is_ok()) continue;  // a shape the codec refuses (int4h on a head_dim not a power of two)
        const StorageFingerprint fp = make_storage_fingerprint(geometry, codec, align, 64, "m");
        ASSERT_TRUE(fp.validate().is_ok()) << fp.describe();
        EXPECT_EQ(*storage_page_bytes(fp), 64 * (*pool)->bytes_per_token()) << fp.describe();
      }
    }
  }
  // Qwen3-8B in int8 at align 16: 74,880 B/token (docs/formats.md).
  const StorageFingerprint qwen =
      make_storage_fingerprint(*resolve_model_geometry("qwen3-8b"), CodecKind::kInt8, 16, 64, "qwen");
  EXPECT_EQ(*storage_page_bytes(qwen), 64u * 74'880u);
  EXPECT_EQ(qwen.describe(), "model=qwen codec=int8 format=1 layers=36 kv_heads=8 head_dim=128/128 tp=0/1 block=64 "
                             "align=16 l1=bf16");
  StorageFingerprint bad = qwen;
  bad.codec = "int3";
  EXPECT_FALSE(storage_page_bytes(bad).is_ok());
}

// ---- values ----------------------------------------------------------------------

struct ValueCase {
  StorageFingerprint fp = small_fingerprint();
  StorageKey key = storage_keys(small_fingerprint(), prompt(8, 2))[1];
  std::vector<std::byte> data = payload(768, 9);
  std::vector<std::byte> value = encode_value(fp, key, data);
  Result<std::span<const std::byte>> decode(std::span<const std::byte> v) const {
    return decode_value(v, fp, key, data.size());
  }
};

bool same_bytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

TEST(StorageValues, RoundTrip) {
  const ValueCase c;
  ASSERT_EQ(c.value.size(), kStorageHeaderBytes + c.data.size());
  auto decoded = c.decode(c.value);
  ASSERT_TRUE(decoded.is_ok()) << decoded.status().to_string();
  EXPECT_TRUE(same_bytes(*decoded, c.data));
  EXPECT_EQ(decoded->data(), c.value.data() + kStorageHeaderBytes);  // a view, not a copy

  const std::vector<std::byte> empty = encode_value(c.fp, c.key, {});
  auto none = decode_value(empty, c.fp, c.key, 0);
  ASSERT_TRUE(none.is_ok()) << none.status().to_string();
  EXPECT_TRUE(none->empty());
}

TEST(StorageValues, EveryHeaderByteCorruptionIsDataLoss) {
  const ValueCase c;
  for (size_t at = 0; at < kStorageHeaderBytes; ++at) {
    for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::vector<std::byte> v = c.value;
      v[at] ^= std::byte{mask};
      auto decoded = c.decode(v);
      ASSERT_FALSE(decoded.is_ok()) << "byte " << at;
      EXPECT_EQ(decoded.status().code(), StatusCode::kDataLoss) << "byte " << at << ": " << decoded.status().to_string();
    }
  }
}

TEST(StorageValues, PayloadCorruptionIsDataLoss) {
  const ValueCase c;
  for (size_t at : {kStorageHeaderBytes, kStorageHeaderBytes + 100, c.value.size() - 1}) {
    std::vector<std::byte> v = c.value;
    v[at] ^= std::byte{0x10};
    expect_error(c.decode(v), StatusCode::kDataLoss, {"payload checksum mismatch", c.key.hex()});
  }
}

TEST(StorageValues, EveryTruncationAndExtensionIsDataLoss) {
  const ValueCase c;
  for (size_t n = 0; n < c.value.size(); ++n) {
    auto decoded = c.decode(std::span(c.value).first(n));
    ASSERT_FALSE(decoded.is_ok()) << n;
    EXPECT_EQ(decoded.status().code(), StatusCode::kDataLoss) << n;
  }
  expect_error(c.decode(std::span(c.value).first(10)), StatusCode::kDataLoss, {"shorter than the 64-byte header"});
  expect_error(c.decode(std::span(c.value).first(100)), StatusCode::kDataLoss,
               {"header says 768 payload bytes, the value holds 36"});
  std::vector<std::byte> longer = c.value;
  longer.push_back(std::byte{0});
  expect_error(c.decode(longer), StatusCode::kDataLoss, {"the value holds 769"});
}

TEST(StorageValues, ForeignFingerprintKeySizeAndVersionAreFailedPreconditions) {
  const ValueCase c;
  StorageFingerprint other = c.fp;
  other.codec = "fp8";  // same payload size, other meaning
  expect_error(decode_value(c.value, other, c.key, c.data.size()), StatusCode::kFailedPrecondition,
               {"written for fingerprint", "codec=fp8"});

  const StorageKey neighbour = storage_keys(c.fp, prompt(8, 2))[0];
  expect_error(decode_value(c.value, c.fp, neighbour, c.data.size()), StatusCode::kFailedPrecondition,
               {"holds the value of key " + c.key.hex()});

  expect_error(decode_value(c.value, c.fp, c.key, c.data.size() + 16), StatusCode::kFailedPrecondition,
               {"768 payload bytes, expected 784"});

  // A well-formed header of another version (its checksum recomputed).
  std::vector<std::byte> v = c.value;
  v[8] = std::byte{2};
  const uint64_t sum = XXH3_64bits(v.data(), 56);
  for (int i = 0; i < 8; ++i) v[56 + static_cast<size_t>(i)] = static_cast<std::byte>(sum >> (8 * i));
  expect_error(c.decode(v), StatusCode::kFailedPrecondition, {"header version 2"});
}

// Whatever happens to a value's bytes, decode_value hands back its own payload
// or nothing: never different bytes.
TEST(StorageValues, RandomDamageNeverYieldsADifferentPayload) {
  std::mt19937 rng(2024);
  const StorageFingerprint fp = small_fingerprint();
  const auto keys = storage_keys(fp, prompt(400, 4));
  int rejected = 0, intact = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const StorageKey& key = keys[rng() % keys.size()];
    const std::vector<std::byte> data = payload(rng() % 2000, static_cast<uint32_t>(trial));
    const std::vector<std::byte> original = encode_value(fp, key, data);
    std::vector<std::byte> v = original;
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int f = 0; f < flips; ++f) v[rng() % v.size()] ^= static_cast<std::byte>(1 + rng() % 255);
    switch (rng() % 4) {
      case 0: v.resize(rng() % (v.size() + 1)); break;
      case 1: v.insert(v.end(), 1 + rng() % 16, static_cast<std::byte>(rng())); break;
      default: break;
    }
    auto decoded = decode_value(v, fp, key, data.size());
    if (decoded.is_ok()) {
      ASSERT_TRUE(same_bytes(*decoded, data)) << "trial " << trial << " decoded a different payload";
      ASSERT_EQ(v, original) << "trial " << trial << " accepted a damaged value";
      ++intact;  // the flips cancelled out
    } else {
      ASSERT_NE(v, original) << "trial " << trial << " refused an intact value";
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 2900);
  (void)intact;
}

// The fuzzer's committed corpus (fuzz/corpus/storage_value), replayed: no
// crash; ok-* decode (at the size they hold) and re-encode to the same bytes;
// bad-* are refused. Inputs the fuzzer adds (named by hash) must not crash.
TEST(StorageValues, FuzzCorpusReplays) {
  const std::filesystem::path dir = HIQ_STORAGE_CORPUS_DIR;
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  const StorageFingerprint fp = small_fingerprint();
  const StorageKey key = storage_keys(fp, std::vector<int32_t>{0, 1, 2, 3})[0];
  int ok = 0, bad = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto bytes = std::as_bytes(std::span(text.data(), text.size()));
    const size_t claimed = bytes.size() >= kStorageHeaderBytes ? bytes.size() - kStorageHeaderBytes : 0;
    const auto decoded = decode_value(bytes, fp, key, claimed);
    const std::string name = entry.path().filename().string();
    if (name.starts_with("ok-")) {
      ++ok;
      ASSERT_TRUE(decoded.is_ok()) << name << ": " << decoded.status().to_string();
      EXPECT_TRUE(same_bytes(encode_value(fp, key, *decoded), bytes)) << name;
    } else if (name.starts_with("bad-")) {
      ++bad;
      EXPECT_FALSE(decoded.is_ok()) << name;
    }
  }
  EXPECT_GE(ok, 3);
  EXPECT_GE(bad, 6);
}

// ---- options ---------------------------------------------------------------------

TEST(StorageOptions, NoneByDefault) {
  auto options = parse_storage_options("none", "", "best_effort");
  ASSERT_TRUE(options.is_ok()) << options.status().to_string();
  EXPECT_EQ(options->backend, StorageBackendKind::kNone);
  EXPECT_EQ(options->prefetch_policy, StoragePrefetchPolicy::kBestEffort);
  auto backend = make_storage_backend(*options);
  ASSERT_TRUE(backend.is_ok());
  EXPECT_EQ(*backend, nullptr);
  EXPECT_TRUE(parse_storage_options("none", " {} ", "timeout").is_ok());
}

TEST(StorageOptions, FileSettings) {
  auto options = parse_storage_options(
      "file", R"({"path": "/mnt/kv", "size": "64GB", "fsync": true, "threads": 4, "prefetch_threshold": 512,
                  "prefetch_timeout_base": 0.5, "prefetch_timeout_per_ki_token": 0.25, "prefetch_timeout_max": 2})",
      "timeout");
  ASSERT_TRUE(options.is_ok()) << options.status().to_string();
  EXPECT_EQ(options->backend, StorageBackendKind::kFile);
  EXPECT_EQ(options->prefetch_policy, StoragePrefetchPolicy::kTimeout);
  EXPECT_EQ(options->file.path, "/mnt/kv");
  EXPECT_EQ(options->file.capacity_bytes, 64'000'000'000u);
  EXPECT_TRUE(options->file.fsync);
  EXPECT_EQ(options->threads, 4);
  EXPECT_EQ(options->prefetch_threshold_tokens, 512u);
  EXPECT_DOUBLE_EQ(options->prefetch_timeout_s(2048), 1.0);
  EXPECT_DOUBLE_EQ(options->prefetch_timeout_s(1 << 20), 2.0);  // capped
  auto bytes = parse_storage_options("file", R"({"path": "/x", "size": 4096})", "wait_complete");
  ASSERT_TRUE(bytes.is_ok());
  EXPECT_EQ(bytes->file.capacity_bytes, 4096u);
  EXPECT_EQ(bytes->prefetch_policy, StoragePrefetchPolicy::kWaitComplete);
}

TEST(StorageOptions, RedisSettingsAndDefaults) {
  auto options = parse_storage_options("redis", R"({"host": "10.0.0.5", "port": 6380, "prefix": "a:",
      "connect_timeout_ms": 50, "command_timeout_ms": 70, "reconnect_initial_ms": 5, "reconnect_max_ms": 500,
      "connections": 8, "ttl_s": 3600})", "best_effort");
  ASSERT_TRUE(options.is_ok()) << options.status().to_string();
  const RedisBackendOptions& r = options->redis;
  EXPECT_EQ(r.host, "10.0.0.5");
  EXPECT_EQ(r.port, 6380);
  EXPECT_EQ(r.key_prefix, "a:");
  EXPECT_EQ(r.connect_timeout_ms, 50);
  EXPECT_EQ(r.command_timeout_ms, 70);
  EXPECT_EQ(r.reconnect_initial_ms, 5);
  EXPECT_EQ(r.reconnect_max_ms, 500);
  EXPECT_EQ(r.connections, 8);
  EXPECT_EQ(r.ttl_seconds, 3600);
  auto defaults = parse_storage_options("redis", "", "best_effort");
  ASSERT_TRUE(defaults.is_ok());
  EXPECT_EQ(defaults->redis.host, "127.0.0.1");
  EXPECT_EQ(defaults->redis.port, 6379);
  EXPECT_DOUBLE_EQ(defaults->prefetch_timeout_s(1024), 2.1);  // SGLang's 2 s + 0.1 s per 1024 tokens
}

TEST(StorageOptions, ErrorsNameTheSetting) {
  const auto bad = StatusCode::kInvalidArgument;
  expect_error(parse_storage_options("s3", "", "best_effort"), bad, {"storage backend 's3'", "none, file, redis"});
  expect_error(parse_storage_options("file", R"({"path": "/x", "size": "1GB"})", "eager"), bad,
               {"prefetch policy 'eager'"});
  expect_error(parse_storage_options("file", "{", "best_effort"), bad, {"storage extra config", "not valid JSON"});
  expect_error(parse_storage_options("file", "[1]", "best_effort"), bad, {"must be a JSON object"});
  expect_error(parse_storage_options("file", R"({"path": "/x", "size": "1GB", "host": "h"})", "best_effort"), bad,
               {"unknown key 'host' for the file backend", "known: fsync, path, size, prefetch_threshold"});
  expect_error(parse_storage_options("file", R"({"path": "/x"})", "best_effort"), bad,
               {"needs a positive size", "--hicache-storage-size"});
  expect_error(parse_storage_options("file", R"({"size": "1GB"})", "best_effort"), bad, {"needs \"path\""});
  expect_error(parse_storage_options("file", R"({"path": "/x", "size": "12XB"})", "best_effort"), bad,
               {"storage extra config: size"});
  expect_error(parse_storage_options("file", R"({"path": "/x", "size": -5})", "best_effort"), bad,
               {"size must be a size"});
  expect_error(parse_storage_options("redis", R"({"port": 70000})", "best_effort"), bad, {"port must be an integer"});
  expect_error(parse_storage_options("redis", R"({"port": "6379"})", "best_effort"), bad, {"port must be", "\"6379\""});
  expect_error(parse_storage_options("redis", R"({"reconnect_initial_ms": 900, "reconnect_max_ms": 100})",
                                     "best_effort"),
               bad, {"reconnect_max_ms 100 is below reconnect_initial_ms 900"});
  expect_error(parse_storage_options("redis", R"({"threads": 0})", "best_effort"), bad, {"threads"});
  expect_error(parse_storage_options("redis", R"({"fsync": true})", "best_effort"), bad, {"unknown key 'fsync'"});
  expect_error(parse_storage_options("none", R"({"path": "/x"})", "best_effort"), bad, {"backend is none"});
  expect_error(parse_storage_options("memory", R"({"size": "1GB", "size": "2GB"})", "best_effort"), bad,
               {"appears twice"});
  expect_error(parse_storage_options("memory", R"({"prefetch_timeout_base": -1})", "best_effort"), bad,
               {"prefetch_timeout_base must be a number"});
}

// --hicache-storage-size: the file or memory backend's capacity, in GB when
// plain; never beside the extra config's "size", never for Redis.
TEST(StorageOptions, TheSizeFlagBoundsFileAndMemoryStorage) {
  auto file = parse_storage_options("file", R"({"path": "/x"})", "best_effort", "64");
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  EXPECT_EQ(file->file.capacity_bytes, 64'000'000'000u);
  auto memory = parse_storage_options("memory", "", "best_effort", "512MiB");
  ASSERT_TRUE(memory.is_ok()) << memory.status().to_string();
  EXPECT_EQ(memory->memory_capacity_bytes, 512u << 20);
  const auto bad = StatusCode::kInvalidArgument;
  expect_error(parse_storage_options("file", R"({"path": "/x", "size": "1GB"})", "best_effort", "2GB"), bad,
               {"--hicache-storage-size", "\"size\"", "give one"});
  expect_error(parse_storage_options("redis", "", "best_effort", "2GB"), bad, {"Redis bounds itself", "maxmemory"});
  expect_error(parse_storage_options("none", "", "best_effort", "2GB"), bad, {"backend is none"});
  expect_error(parse_storage_options("file", R"({"path": "/x"})", "best_effort", "lots"), bad,
               {"--hicache-storage-size"});
  expect_error(parse_storage_options("file", R"({"path": "/x"})", "best_effort", "0"), bad, {"more than 0"});
}

TEST(StorageOptions, MakesTheNamedBackend) {
  testing::StorageTempDir dir;
  auto file = parse_storage_options("file", R"({"path": ")" + (dir.path() / "kv").string() + R"(", "size": "1MB"})",
                                    "best_effort");
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  auto backend = make_storage_backend(*file);
  ASSERT_TRUE(backend.is_ok()) << backend.status().to_string();
  EXPECT_EQ((*backend)->name(), "file");
  EXPECT_TRUE(std::filesystem::is_directory(dir.path() / "kv"));

  auto memory = make_storage_backend(*parse_storage_options("memory", R"({"size": "1MB"})", "best_effort"));
  ASSERT_TRUE(memory.is_ok());
  EXPECT_EQ((*memory)->name(), "memory");
  auto redis = make_storage_backend(*parse_storage_options("redis", "", "best_effort"));  // connects lazily
  ASSERT_TRUE(redis.is_ok());
  EXPECT_EQ((*redis)->name(), "redis");

  StorageOptions invalid;
  invalid.backend = StorageBackendKind::kFile;  // no path, no size
  EXPECT_EQ(make_storage_backend(invalid).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace hiq

namespace hiq {
namespace {

// Block sizes by backend: files take 64 tokens; Redis values stay at or under
// 1.25 MiB (Qwen3-8B: bf16 147,456 B/token, int8 74,880, int4h 41,472).
TEST(StorageBlockTokens, DefaultsFollowTheBackendAndTheValueSize) {
  EXPECT_EQ(default_storage_block_tokens(StorageBackendKind::kFile, 74880, 1), 64);
  EXPECT_EQ(default_storage_block_tokens(StorageBackendKind::kFile, 74880, 16), 64);
  EXPECT_EQ(default_storage_block_tokens(StorageBackendKind::kFile, 74880, 128), 128);  // one page at least
  EXPECT_EQ(default_storage_block_tokens(StorageBackendKind::kRedis, 147456, 1), 8);    // 1.18 MB
  EXPECT_EQ(default_storage_block_tokens(StorageBackendKind::kRedis, 74880, 1), 16);    // 1.20 MB
  EXPECT_EQ(default_storage_block_tokens(StorageBackendKind::kRedis, 41472, 1), 16);    // 0.66 MB; 32 would be 1.33
  EXPECT_EQ(default_storage_block_tokens(StorageBackendKind::kRedis, 74880, 32), 32);   // a page is the least
  EXPECT_EQ(default_storage_block_tokens(StorageBackendKind::kRedis, 100, 1), 1024);    // tiny models: capped
  for (size_t bytes : {size_t{1000}, size_t{41472}, size_t{74880}, size_t{147456}}) {
    const int b = default_storage_block_tokens(StorageBackendKind::kRedis, bytes, 1);
    EXPECT_LE(static_cast<size_t>(b) * bytes + kStorageHeaderBytes, kRedisValueTargetBytes) << bytes;
    EXPECT_EQ(b & (b - 1), 0) << "a power of two";
  }
}

}  // namespace
}  // namespace hiq
