// model/loaded_model.h — a Hugging Face model directory, loaded for the CPU
// forward pass: its config, its memory-mapped checkpoint, and views of every
// weight in the checkpoint's own dtypes (nothing is copied or converted).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "model/checkpoint.h"
#include "model/cpu_forward.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace hiq {

class LoadedModel {
 public:
  // Reads DIR/config.json and the checkpoint (model.safetensors or a sharded
  // index), binds every tensor and checks every shape. Errors name the file
  // and the field or tensor.
  static Result<std::unique_ptr<LoadedModel>> load(const std::string& directory);

  const ModelConfig& config() const { return config_; }
  const ModelShape& shape() const { return shape_; }
  const CpuModelWeights& weights() const { return weights_; }

 private:
  LoadedModel() = default;

  ModelConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;  // the mappings every view points into
  ModelShape shape_;
  CpuModelWeights weights_;
};

// The sizes and rotary table of `config`.
Result<ModelShape> model_shape(const ModelConfig& config);
// Views of `weights` for the CPU operations.
CpuModelWeights cpu_model_weights(const ModelWeights& weights);

}  // namespace hiq
