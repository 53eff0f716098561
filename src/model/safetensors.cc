#include "model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "kv/config_reader.h"
#include "core/json_input.h"

namespace hiq {
namespace {

using nlohmann::json;

// Real headers nest three deep (header → entry → shape); unknown fields we
// ignore may nest a little more. Anything deeper is not a checkpoint, and
// refusing it before parsing bounds the memory a hostile header can cost.
constexpr int kMaxHeaderNesting = 16;

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::optional<TensorDtype> dtype_from_name(std::string_view name) {
  if (name == "BF16") return TensorDtype::kBf16;
  if (name == "F16") return TensorDtype::kF16;
  if (name == "F32") return TensorDtype::kF32;
  return std::nullopt;
}

// A non-negative JSON integer, or nullopt (negative, fractional, too large, not a number).
std::optional<uint64_t> as_unsigned(const json& v) {
  if (!v.is_number_unsigned()) return std::nullopt;  // nlohmann parses non-negative integers as unsigned
  return v.get<uint64_t>();
}

Result<SafetensorsEntry> parse_entry(const std::string& name, const json& entry, const std::string& file) {
  const std::string where = file + ": tensor " + quote_for_message(name);
  if (!entry.is_object()) return data_loss(where + ": expected an object with dtype, shape and data_offsets");
  const auto field = [&](const char* key) -> const json* {
    auto it = entry.find(key);
    return it == entry.end() ? nullptr : &*it;
  };
  SafetensorsEntry out;
  out.name = name;

  const json* dtype = field("dtype");
  if (dtype == nullptr) return data_loss(where + ": field 'dtype' is missing");
  if (!dtype->is_string()) return data_loss(where + ": field 'dtype' must be a string");
  const auto parsed_dtype = dtype_from_name(dtype->get_ref<const std::string&>());
  if (!parsed_dtype)
    return invalid_argument(where + ": dtype " + quote_for_message(dtype->get_ref<const std::string&>()) +
                            " is not supported (expected BF16, F16 or F32)");
  out.dtype = *parsed_dtype;

  const json* shape = field("shape");
  if (shape == nullptr) return data_loss(where + ": field 'shape' is missing");
  if (!shape->is_array()) return data_loss(where + ": field 'shape' must be an array of dimensions");
  uint64_t elements = 1;
  bool overflow = false;
  for (const json& dim : *shape) {
    const auto d = as_unsigned(dim);
    if (!d || *d > static_cast<uint64_t>(INT64_MAX))
      return data_loss(where + ": field 'shape' must hold non-negative integers (got " + describe_json_value(dim) +
                       ")");
    out.shape.push_back(static_cast<int64_t>(*d));
    // Keep checking every dim even after an overflow: a later 0 makes the count 0.
    overflow = overflow || __builtin_mul_overflow(elements, *d, &elements);
  }
  if (std::find(out.shape.begin(), out.shape.end(), 0) != out.shape.end()) {
    elements = 0;
    overflow = false;
  }
  uint64_t bytes = 0;
  if (overflow || __builtin_mul_overflow(elements, uint64_t{tensor_dtype_bytes(out.dtype)}, &bytes))
    return data_loss(where + ": shape " + shape_text(out.shape) + " holds more bytes than any file can");

  const json* offsets = field("data_offsets");
  if (offsets == nullptr) return data_loss(where + ": field 'data_offsets' is missing");
  if (!offsets->is_array() || offsets->size() != 2)
    return data_loss(where + ": field 'data_offsets' must be [begin, end]");
  const auto begin = as_unsigned((*offsets)[0]);
  const auto end = as_unsigned((*offsets)[1]);
  if (!begin || !end) return data_loss(where + ": field 'data_offsets' must hold two non-negative integers");
  if (*begin > *end)
    return data_loss(where + ": data_offsets [" + std::to_string(*begin) + ", " + std::to_string(*end) +
                     "] begin after they end");
  out.begin = *begin;
  out.end = *end;
  if (*end - *begin != bytes)
    return data_loss(where + ": data_offsets [" + std::to_string(*begin) + ", " + std::to_string(*end) + "] span " +
                     std::to_string(*end - *begin) + " bytes, but " + std::string(tensor_dtype_name(out.dtype)) +
                     " " + shape_text(out.shape) + " needs " + std::to_string(bytes));
  return out;
}

Status parse_metadata(const json& metadata, const std::string& file, std::map<std::string, std::string>& out) {
  if (!metadata.is_object()) return data_loss(file + ": '__metadata__' must be an object of strings");
  for (const auto& [key, value] : metadata.items()) {
    if (!value.is_string())
      return data_loss(file + ": '__metadata__' entry " + quote_for_message(key) + " must be a string");
    out.emplace(key, value.get<std::string>());
  }
  return Status::ok();
}

// Tensors sorted by offset must tile the data section: no overlap (two
// tensors sharing bytes) and no hole (bytes no tensor owns; the format forbids
// them so a file cannot smuggle other content).
Status check_tiling(std::vector<SafetensorsEntry>& tensors, uint64_t data_bytes, const std::string& file) {
  std::sort(tensors.begin(), tensors.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t covered = 0;  // the data section is tiled up to here
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry& t : tensors) {
    if (t.end > data_bytes)
      return data_loss(file + ": tensor " + quote_for_message(t.name) + ": data_offsets [" + std::to_string(t.begin) + ", " +
                       std::to_string(t.end) + "] run past the data section of " + std::to_string(data_bytes) +
                       " bytes (truncated file, or a header that lies)");
    if (t.begin < covered)
      return data_loss(file + ": tensors " + quote_for_message(previous->name) + " and " + quote_for_message(t.name) +
                       " overlap (bytes " + std::to_string(t.begin) + " to " + std::to_string(covered) +
                       " of the data section)");
    if (t.begin > covered)
      return data_loss(file + ": bytes " + std::to_string(covered) + " to " + std::to_string(t.begin) +
                       " of the data section belong to no tensor (a hole before " + quote_for_message(t.name) + ")");
    covered = t.end;
    previous = &t;
  }
  if (covered != data_bytes)
    return data_loss(file + ": " + std::to_string(data_bytes - covered) +
                     " bytes at the end of the data section belong to no tensor");
  return Status::ok();
}

}  // namespace

std::string_view tensor_dtype_name(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::kBf16: return "BF16";
    case TensorDtype::kF16: return "F16";
    case TensorDtype::kF32: return "F32";
  }
  return "?";
}

Result<SafetensorsHeader> parse_safetensors_header(std::span<const std::byte> file, std::string_view file_name) {
  const std::string name(file_name);
  if (file.size() < 8)
    return data_loss(name + ": truncated: " + std::to_string(file.size()) +
                     " bytes, shorter than the 8-byte header length");
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | static_cast<uint8_t>(file[static_cast<size_t>(i)]);
  if (header_bytes > kMaxSafetensorsHeaderBytes)
    return data_loss(name + ": header length " + std::to_string(header_bytes) + " exceeds " +
                     std::to_string(kMaxSafetensorsHeaderBytes) + " bytes (not a safetensors file, or corrupt)");
  if (header_bytes > file.size() - 8)
    return data_loss(name + ": truncated: the header needs " + std::to_string(header_bytes) + " bytes, " +
                     std::to_string(file.size() - 8) + " follow the length");
  const std::string_view text(reinterpret_cast<const char*>(file.data() + 8), header_bytes);
  if (text.empty() || text.front() != '{') return data_loss(name + ": the header does not start with '{'");
  HIQ_ASSIGN_OR_RETURN(json header, parse_strict_json(text, name + ": header", kMaxHeaderNesting, "tensor"));
  if (!header.is_object()) return data_loss(name + ": the header is not a JSON object");

  SafetensorsHeader out;
  out.data_offset = 8 + header_bytes;
  out.data_bytes = file.size() - out.data_offset;
  out.tensors.reserve(header.size());
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      // null is "no metadata", as the reference reader takes it.
      if (!value.is_null()) HIQ_RETURN_IF_ERROR(parse_metadata(value, name, out.metadata));
      continue;
    }
    HIQ_ASSIGN_OR_RETURN(SafetensorsEntry entry, parse_entry(key, value, name));
    out.tensors.push_back(std::move(entry));
  }
  HIQ_RETURN_IF_ERROR(check_tiling(out.tensors, out.data_bytes, name));
  return out;
}

int64_t TensorView::elements() const {
  // Fits: the parser checked count × dtype size against the file. A zero dim
  // is handled first so that the partial products below never overflow.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  HIQ_ASSIGN_OR_RETURN(MappedFile mapping, MappedFile::open(path));
  HIQ_ASSIGN_OR_RETURN(SafetensorsHeader header, parse_safetensors_header(mapping.bytes(), path));
  SafetensorsFile file;
  file.path_ = path;
  const std::byte* data_section = mapping.bytes().data() + header.data_offset;
  file.tensors_.reserve(header.tensors.size());
  for (SafetensorsEntry& entry : header.tensors) {
    file.index_.emplace(entry.name, file.tensors_.size());
    file.tensors_.push_back(TensorView{.name = std::move(entry.name),
                                       .dtype = entry.dtype,
                                       .shape = std::move(entry.shape),
                                       .data = data_section + entry.begin,
                                       .bytes = static_cast<size_t>(entry.end - entry.begin),
                                       .file = path});
  }
  file.metadata_ = std::move(header.metadata);
  file.mapping_ = std::move(mapping);
  return file;
}

const TensorView* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace hiq
