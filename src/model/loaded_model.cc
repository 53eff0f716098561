#include "model/loaded_model.h"

namespace hiq {
namespace {

cpu::WeightType weight_type(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::kBf16: return cpu::WeightType::kBf16;
    case TensorDtype::kF16: return cpu::WeightType::kF16;
    case TensorDtype::kF32: return cpu::WeightType::kF32;
  }
  return cpu::WeightType::kBf16;
}

cpu::MatrixView matrix(const TensorView& t) {
  return {weight_type(t.dtype), t.data, t.shape.size() == 2 ? t.shape[0] : 0, t.shape.size() == 2 ? t.shape[1] : 0};
}

cpu::VectorView vector(const TensorView& t) { return {weight_type(t.dtype), t.data, t.elements()}; }
cpu::VectorView vector(const std::optional<TensorView>& t) { return t ? vector(*t) : cpu::VectorView{}; }

}  // namespace

Result<ModelShape> model_shape(const ModelConfig& config) {
  HIQ_RETURN_IF_ERROR(config.validate());
  ModelShape s;
  s.vocab_size = config.vocab_size;
  s.hidden_size = config.hidden_size;
  s.intermediate_size = config.intermediate_size;
  s.num_layers = config.num_layers;
  s.num_heads = config.num_attention_heads;
  s.num_kv_heads = config.num_kv_heads;
  s.head_dim = config.head_dim;
  s.rms_norm_eps = static_cast<float>(config.rms_norm_eps);
  s.qk_norm = config.qk_norm;
  HIQ_ASSIGN_OR_RETURN(s.rope, make_rope_table(config.head_dim, config.rope_theta, config.rope_scaling,
                                               config.max_position_embeddings));
  return s;
}

CpuModelWeights cpu_model_weights(const ModelWeights& w) {
  CpuModelWeights out;
  out.embed_tokens = matrix(w.embed_tokens);
  out.final_norm = vector(w.final_norm);
  out.lm_head = matrix(w.lm_head);
  for (const ModelWeights::Layer& l : w.layers) {
    LayerWeights c;
    c.input_norm = vector(l.input_layernorm);
    c.q_proj = matrix(l.q_proj);
    c.k_proj = matrix(l.k_proj);
    c.v_proj = matrix(l.v_proj);
    c.q_bias = vector(l.q_proj_bias);
    c.k_bias = vector(l.k_proj_bias);
    c.v_bias = vector(l.v_proj_bias);
    c.q_norm = vector(l.q_norm);
    c.k_norm = vector(l.k_norm);
    c.o_proj = matrix(l.o_proj);
    c.o_bias = vector(l.o_proj_bias);
    c.post_attention_norm = vector(l.post_attention_layernorm);
    c.gate_proj = matrix(l.gate_proj);
    c.up_proj = matrix(l.up_proj);
    c.down_proj = matrix(l.down_proj);
    out.layers.push_back(c);
  }
  return out;
}

Result<std::unique_ptr<LoadedModel>> LoadedModel::load(const std::string& directory) {
  std::unique_ptr<LoadedModel> m(new LoadedModel());
  HIQ_ASSIGN_OR_RETURN(m->config_, model_config_from_file(directory + "/config.json"));
  HIQ_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::open(directory));
  m->checkpoint_ = std::make_unique<Checkpoint>(std::move(checkpoint));
  HIQ_ASSIGN_OR_RETURN(const ModelWeights bound, bind_weights(m->config_, *m->checkpoint_));
  HIQ_ASSIGN_OR_RETURN(m->shape_, model_shape(m->config_));
  m->weights_ = cpu_model_weights(bound);
  HIQ_RETURN_IF_ERROR(check_weights(m->shape_, m->weights_).with_context(directory));
  return m;
}

}  // namespace hiq
