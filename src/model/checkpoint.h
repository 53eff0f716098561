// model/checkpoint.h — the tensors of a Hugging Face model directory: one
// `model.safetensors`, or `model.safetensors.index.json` and the shards its
// weight_map names. Every file is memory-mapped for the Checkpoint's lifetime.
//
// Errors name the directory or file and the tensor:
//   kNotFound   no such directory; neither file present (a PyTorch-only
//               checkpoint is named as such); a shard the index names is missing
//   kDataLoss   any safetensors error (truncated, lying header, ...); an index
//               that is not JSON, has no weight_map, or names a shard outside
//               the directory; a tensor the index maps to a shard that lacks
//               it; a tensor present in two shards
//   kInvalidArgument  a tensor of a dtype we do not load
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/safetensors.h"

namespace hiq {

inline constexpr std::string_view kSingleFileCheckpoint = "model.safetensors";
inline constexpr std::string_view kShardIndexFile = "model.safetensors.index.json";

class Checkpoint {
 public:
  // Like transformers, prefers model.safetensors when both it and an index exist.
  static Result<Checkpoint> open(const std::string& directory);

  const std::string& directory() const { return directory_; }
  // nullptr when no file holds a tensor of that name. The view stays valid
  // while this Checkpoint lives (moves included).
  const TensorView* find(std::string_view name) const;
  // Every tensor name, sorted.
  std::vector<std::string> names() const;
  size_t tensor_count() const { return tensors_.size(); }
  // The files mapped, in the order they were opened (shards sorted by name).
  const std::vector<SafetensorsFile>& files() const { return files_; }

 private:
  std::string directory_;
  std::vector<SafetensorsFile> files_;
  // Points into files_: a SafetensorsFile keeps its views in place when moved.
  std::map<std::string, const TensorView*, std::less<>> tensors_;
};

}  // namespace hiq
