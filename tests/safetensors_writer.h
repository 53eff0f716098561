// tests/safetensors_writer.h — writes safetensors files and Hugging Face
// model directories for tests: well-formed ones through the same layout the
// reference writer uses (header padded with spaces to 8 bytes, tensors back
// to back), and malformed ones from a raw header string.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "codec/numeric.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace hiq::testing {

// A fresh directory under the system temp dir, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("hiq_model_test_" + std::to_string(rd()) + "_" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

struct WriterTensor {
  std::string name;
  std::string dtype;             // "BF16", "F16", "F32" — or anything, to write files a reader must refuse
  std::vector<int64_t> shape;
  std::vector<std::byte> data;   // written as is
};

inline std::string dtype_text(TensorDtype dtype) { return std::string(tensor_dtype_name(dtype)); }

// `count` elements of `dtype` with values that differ per element and per
// seed, so a test can tell tensors apart after a round trip.
inline std::vector<std::byte> pattern_bytes(TensorDtype dtype, int64_t count, uint32_t seed) {
  std::vector<std::byte> out(static_cast<size_t>(count) * tensor_dtype_bytes(dtype));
  uint32_t state = seed * 2654435761u + 12345u;
  for (int64_t i = 0; i < count; ++i) {
    state = state * 1664525u + 1013904223u;
    const float value = static_cast<float>(static_cast<int32_t>(state >> 8) % 2000 - 1000) / 1024.0f;
    uint32_t bits = 0;
    std::memcpy(&bits, &value, 4);
    std::byte* dst = out.data() + static_cast<size_t>(i) * tensor_dtype_bytes(dtype);
    if (dtype == TensorDtype::kF32) {
      std::memcpy(dst, &bits, 4);
    } else {
      // BF16: the top half of the float. F16: any 16 bits will do for a byte round trip.
      const auto half = static_cast<uint16_t>(dtype == TensorDtype::kBf16 ? bits >> 16 : (bits >> 13) & 0x7fff);
      std::memcpy(dst, &half, 2);
    }
  }
  return out;
}

// A float F16 holds exactly (a normal half, or zero) as F16 bits; a test's
// values are chosen so, and anything else fails the test.
inline uint16_t exact_f16(float f) {
  const auto u = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  if ((u & 0x7FFFFFFFu) == 0) return sign;
  const int exponent = static_cast<int>((u >> 23) & 0xFF) - 127 + 15;
  EXPECT_TRUE(exponent >= 1 && exponent <= 30 && (u & 0x1FFFu) == 0) << f << " is not a normal half exactly";
  return static_cast<uint16_t>(sign | (exponent << 10) | ((u >> 13) & 0x3FFu));
}

// `values` stored as `dtype`: BF16 rounded to nearest even, F16 exactly (exact_f16).
inline std::vector<std::byte> encode_floats(const std::vector<float>& values, TensorDtype dtype) {
  std::vector<std::byte> out(values.size() * tensor_dtype_bytes(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    std::byte* dst = out.data() + i * tensor_dtype_bytes(dtype);
    if (dtype == TensorDtype::kF32) {
      std::memcpy(dst, &values[i], 4);
    } else {
      const uint16_t half = dtype == TensorDtype::kBf16 ? numeric::float_to_bf16(values[i]) : exact_f16(values[i]);
      std::memcpy(dst, &half, 2);
    }
  }
  return out;
}

inline int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

inline WriterTensor make_tensor(std::string name, TensorDtype dtype, std::vector<int64_t> shape, uint32_t seed = 1) {
  std::vector<std::byte> data = pattern_bytes(dtype, element_count(shape), seed);
  return {std::move(name), dtype_text(dtype), std::move(shape), std::move(data)};
}

// The header of `tensors` laid out back to back in the given order.
inline std::string safetensors_header_json(const std::vector<WriterTensor>& tensors,
                                           const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const WriterTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  return header.dump();
}

// A file from a raw header (any text: tests of malformed headers) and data;
// the header is padded with spaces to a multiple of 8 bytes, as the reference
// writer does.
inline std::vector<std::byte> safetensors_file_bytes(std::string header, std::span<const std::byte> data,
                                                     bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<std::byte> out(8 + header.size() + data.size());
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

inline std::vector<std::byte> safetensors_file_bytes(const std::vector<WriterTensor>& tensors,
                                                     const std::map<std::string, std::string>& metadata = {}) {
  std::vector<std::byte> data;
  for (const WriterTensor& t : tensors) data.insert(data.end(), t.data.begin(), t.data.end());
  return safetensors_file_bytes(safetensors_header_json(tensors, metadata), data);
}

inline void write_bytes(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

inline void write_safetensors(const std::filesystem::path& path, const std::vector<WriterTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
  write_bytes(path, safetensors_file_bytes(tensors, metadata));
}

// Every tensor `config` expects, filled with per-tensor patterns of `dtype`.
inline std::vector<WriterTensor> model_tensors(const ModelConfig& config, TensorDtype dtype = TensorDtype::kBf16) {
  std::vector<WriterTensor> out;
  uint32_t seed = 1;
  for (const TensorSpec& spec : expected_tensors(config)) out.push_back(make_tensor(spec.name, dtype, spec.shape, seed++));
  return out;
}

// A model directory: config.json, and the tensors in model.safetensors
// (shards == 1) or split round-robin over `shards` files named as
// transformers names them, with model.safetensors.index.json.
inline void write_checkpoint(const std::filesystem::path& dir, const std::string& config_json,
                             const std::vector<WriterTensor>& tensors, int shards = 1) {
  std::filesystem::create_directories(dir);
  write_text(dir / "config.json", config_json);
  if (shards == 1) {
    write_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}});
    return;
  }
  std::vector<std::vector<WriterTensor>> parts(static_cast<size_t>(shards));
  for (size_t i = 0; i < tensors.size(); ++i) parts[i % parts.size()].push_back(tensors[i]);
  nlohmann::json weight_map = nlohmann::json::object();
  for (int s = 0; s < shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, shards);
    write_safetensors(dir / name, parts[static_cast<size_t>(s)], {{"format", "pt"}});
    for (const WriterTensor& t : parts[static_cast<size_t>(s)]) weight_map[t.name] = name;
  }
  write_text(dir / "model.safetensors.index.json",
             nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump(2));
}

}  // namespace hiq::testing
