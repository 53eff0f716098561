// model/safetensors.h — the safetensors file format: a header parser that
// trusts nothing, and a memory-mapped file of tensor views.
//
// Layout of a file (https://github.com/huggingface/safetensors):
//
//   [8 bytes]  N, the header length, unsigned little-endian
//   [N bytes]  the header: a UTF-8 JSON object, starting with '{', optionally
//              padded with trailing spaces
//              { "<tensor name>": {"dtype": "BF16", "shape": [4096, 4096],
//                                  "data_offsets": [begin, end]},
//                ...,
//                "__metadata__": {"<key>": "<string value>", ...} }   (optional)
//   [rest]     the data section; offsets are relative to its start
//
// The parser checks everything a file could lie about, because a checkpoint
// is input from outside: a header length beyond the file or above 100 MB,
// JSON that is invalid or nested absurdly deep, duplicate keys, entries that
// are not objects or lack fields, negative or non-integer dimensions, an
// element count × dtype size that overflows or differs from end − begin,
// begin > end, offsets past the data section, and — as the format demands —
// tensors that overlap or leave bytes of the data section unindexed. Every
// error names the file and, where there is one, the tensor.
//
// Error codes: kDataLoss for a file that breaks the format (corrupt,
// truncated, lying); kInvalidArgument for a well-formed file holding a dtype
// we do not load; kNotFound for a missing file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/mapped_file.h"

namespace hiq {

// Element types we load. Other safetensors dtypes (I64, U8, F8_E4M3, ...) are
// rejected by name: the Qwen3-family checkpoints we serve hold none of them.
enum class TensorDtype : uint8_t { kBf16, kF16, kF32 };

// The name the format uses: "BF16", "F16", "F32".
std::string_view tensor_dtype_name(TensorDtype dtype);
constexpr size_t tensor_dtype_bytes(TensorDtype dtype) { return dtype == TensorDtype::kF32 ? 4 : 2; }

// The reference implementation refuses longer headers; so do we.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// One tensor as a header describes it.
struct SafetensorsEntry {
  std::string name;
  TensorDtype dtype = TensorDtype::kBf16;
  std::vector<int64_t> shape;  // every dim ≥ 0; empty for a scalar (one element)
  uint64_t begin = 0;          // [begin, end): bytes of the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  uint64_t data_offset = 0;  // where the data section starts in the file (8 + N)
  uint64_t data_bytes = 0;   // length of the data section: the rest of the file
  // Ordered by offset; consecutive entries tile the data section exactly.
  std::vector<SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__", e.g. {"format": "pt"}
};

// Parses and validates the header of a whole safetensors file held in `file`
// (its data section is not read, only its length). `file_name` names the file
// in errors. A pure function of its input, safe on any bytes (it is fuzzed:
// fuzz/safetensors_fuzz.cc).
Result<SafetensorsHeader> parse_safetensors_header(std::span<const std::byte> file, std::string_view file_name);

// A tensor inside a mapped file. `data` points into the mapping of the
// SafetensorsFile (or Checkpoint) that produced the view and is valid while
// that object lives; moving the owner keeps it valid. Elements are stored
// row-major, little-endian, with no alignment promised (a header has any
// length), so readers load them with memcpy or bit casts of bytes.
struct TensorView {
  std::string name;
  TensorDtype dtype = TensorDtype::kBf16;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t bytes = 0;  // = elements() × tensor_dtype_bytes(dtype)
  std::string file;  // path of the file it lives in, for error messages

  int64_t elements() const;
};

// One memory-mapped .safetensors file. Move-only; the views it hands out
// point into its mapping.
class SafetensorsFile {
 public:
  // Errors: those of MappedFile::open and parse_safetensors_header, e.g. a
  // truncated file (kDataLoss).
  static Result<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return path_; }
  // In the order of the data section.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  // nullptr when the file holds no tensor of that name.
  const TensorView* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string path_;
  MappedFile mapping_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name → position in tensors_
  std::map<std::string, std::string> metadata_;
};

}  // namespace hiq
