#include "model/checkpoint.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "model/mapped_file.h"
#include "core/json_input.h"

namespace hiq {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool is_file(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

// A shard named by an index must be a plain relative path inside the
// directory: an index cannot make us map files elsewhere.
bool is_safe_shard_name(const std::string& name) {
  if (name.empty() || name.find('\0') != std::string::npos) return false;
  const fs::path path(name);
  if (path.is_absolute() || path.has_root_name() || path.has_root_directory()) return false;
  for (const fs::path& part : path)
    if (part == "..") return false;
  return true;
}

// The weight_map of an index: tensor name → shard file name.
Result<std::map<std::string, std::string>> read_weight_map(const std::string& index_path) {
  HIQ_ASSIGN_OR_RETURN(MappedFile mapping, MappedFile::open(index_path));
  const std::span<const std::byte> bytes = mapping.bytes();
  constexpr size_t kMaxIndexBytes = 64u << 20;  // the index of a 1T-parameter model is a few MB
  if (bytes.size() > kMaxIndexBytes)
    return data_loss(index_path + ": " + std::to_string(bytes.size()) + " bytes is too large for a shard index");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  // A tensor listed twice in weight_map is a duplicate key of a nested object.
  HIQ_ASSIGN_OR_RETURN(json index, parse_strict_json(text, index_path, /*max_nesting=*/8));
  if (!index.is_object()) return data_loss(index_path + ": expected a JSON object");
  auto it = index.find("weight_map");
  if (it == index.end() || !it->is_object())
    return data_loss(index_path + ": field 'weight_map' is missing or not an object");
  std::map<std::string, std::string> weight_map;
  for (const auto& [tensor, shard] : it->items()) {
    if (!shard.is_string())
      return data_loss(index_path + ": weight_map entry " + quote_for_message(tensor) + " must name a file");
    const auto& shard_name = shard.get_ref<const std::string&>();
    if (!is_safe_shard_name(shard_name))
      return data_loss(index_path + ": weight_map entry " + quote_for_message(tensor) + " names " +
                       quote_for_message(shard_name) + ", not a file inside the model directory");
    // "./a.safetensors" and "a.safetensors" are one file: open it once.
    weight_map.emplace(tensor, fs::path(shard_name).lexically_normal().string());
  }
  return weight_map;
}

}  // namespace

Result<Checkpoint> Checkpoint::open(const std::string& directory) {
  std::error_code ec;
  if (!fs::exists(directory, ec)) return not_found(directory + ": no such model directory");
  if (!fs::is_directory(directory, ec)) return invalid_argument(directory + ": is not a directory");
  const fs::path dir(directory);

  Checkpoint checkpoint;
  checkpoint.directory_ = directory;
  if (is_file(dir / kSingleFileCheckpoint)) {
    HIQ_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open((dir / kSingleFileCheckpoint).string()));
    checkpoint.files_.push_back(std::move(file));
  } else if (is_file(dir / kShardIndexFile)) {
    const std::string index_path = (dir / kShardIndexFile).string();
    HIQ_ASSIGN_OR_RETURN(auto weight_map, read_weight_map(index_path));
    std::map<std::string, std::string> first_tensor_of_shard;  // for "missing shard" messages
    for (const auto& [tensor, shard] : weight_map) first_tensor_of_shard.emplace(shard, tensor);
    std::map<std::string, size_t> file_of_shard;  // shard name → position in files_
    for (const auto& [shard, tensor] : first_tensor_of_shard) {
      const fs::path path = dir / shard;
      if (!is_file(path))
        return not_found(index_path + ": shard " + quote_for_message(shard) + " (holding " +
                         quote_for_message(tensor) + ") does not exist in " + directory);
      HIQ_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(path.string()));
      file_of_shard.emplace(shard, checkpoint.files_.size());
      checkpoint.files_.push_back(std::move(file));
    }
    // Every tensor the index promises must be in the shard it names.
    for (const auto& [tensor, shard] : weight_map) {
      if (checkpoint.files_[file_of_shard.at(shard)].find(tensor) == nullptr)
        return data_loss(index_path + ": maps tensor " + quote_for_message(tensor) + " to shard " +
                         quote_for_message(shard) + ", which does not hold it");
    }
  } else if (is_file(dir / "pytorch_model.bin") || is_file(dir / "pytorch_model.bin.index.json")) {
    return not_found(directory + ": holds only PyTorch .bin weights; convert them to safetensors");
  } else {
    return not_found(directory + ": holds neither " + std::string(kSingleFileCheckpoint) + " nor " +
                     std::string(kShardIndexFile));
  }

  // A shard may hold tensors the index does not list; the shard's contents are
  // what gets served, so they count. A name in two files is ambiguous.
  for (const SafetensorsFile& file : checkpoint.files_) {
    for (const TensorView& view : file.tensors()) {
      auto [it, inserted] = checkpoint.tensors_.emplace(view.name, &view);
      if (!inserted)
        return data_loss(directory + ": tensor " + quote_for_message(view.name) + " is in two shards, " +
                         it->second->file + " and " + view.file);
    }
  }
  return checkpoint;
}

const TensorView* Checkpoint::find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, view] : tensors_) names.push_back(name);
  return names;
}

}  // namespace hiq
