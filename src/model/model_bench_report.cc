// The host half of `hiq bench model`: the work a pass does, and its report as
// JSON (model/model_bench.h). Built with or without the CUDA backend, so the
// report's fields are tested on any machine.
#include <nlohmann/json.hpp>

#include "model/model_bench.h"

namespace hiq {
namespace {

nlohmann::json components_json(const ModelBenchReport::Components& c) {
  const ForwardProfile& s = c.seconds;
  const auto tflops = [](double flops, double seconds) { return seconds > 0 ? flops / seconds / 1e12 : 0.0; };
  return {{"gemm_s", s.gemm_seconds},
          {"attention_s", s.attention_seconds},
          {"norm_elementwise_s", s.norm_elementwise_seconds},
          {"lm_head_s", s.lm_head_seconds},
          {"other_s", s.other_seconds},
          {"total_s", s.total_seconds()},
          {"gemm_flops", c.gemm_flops},
          {"attention_flops", c.attention_flops},
          {"gemm_tflops", tflops(c.gemm_flops, s.gemm_seconds)},
          {"attention_tflops", tflops(c.attention_flops, s.attention_seconds)}};
}

}  // namespace

double layer_gemm_flops(const ModelShape& s, int64_t tokens) {
  const double hidden = s.hidden_size, q_out = double{1} * s.num_heads * s.head_dim,
               kv_out = double{1} * s.num_kv_heads * s.head_dim, inter = s.intermediate_size;
  const double weights = hidden * (q_out + 2 * kv_out) + q_out * hidden + hidden * 2 * inter + inter * hidden;
  return 2.0 * static_cast<double>(tokens) * weights * s.num_layers;
}

double attention_flops(const ModelShape& s, int64_t q_len, int64_t kv_len) {
  const double q = static_cast<double>(q_len), cached = static_cast<double>(kv_len - q_len);
  const double visible = q * cached + q * (q + 1) / 2;  // Σ over the new tokens of what each sees
  return 4.0 * s.head_dim * s.num_heads * visible * s.num_layers;
}

std::string to_json(const ModelBenchReport& r) {
  nlohmann::json out = {{"gpu", r.gpu},
                        {"weight_bytes", r.weight_bytes},
                        {"weight_bytes_per_step", r.weight_bytes_per_step},
                        {"device_copy_bytes_per_s", r.device_copy_bytes_per_s},
                        {"cuda_graphs",
                         {{"enabled", r.cuda_graphs},
                          {"captured", r.graphs.captured},
                          {"replayed", r.graphs.replayed},
                          {"capture_failures", r.graphs.capture_failures},
                          {"dropped", r.graphs.dropped}}},
                        {"prefill", nlohmann::json::array()},
                        {"decode", nlohmann::json::array()},
                        {"restore", nlohmann::json::array()}};
  for (const auto& p : r.prefill)
    out["prefill"].push_back({{"tokens", p.tokens},
                              {"seconds", p.seconds},
                              {"tokens_per_s", p.tokens / p.seconds},
                              {"components", components_json(p.components)}});
  for (const auto& d : r.decode)
    out["decode"].push_back({{"batch", d.batch},
                             {"context", d.context},
                             {"step_seconds", d.step_seconds},
                             {"eager_step_seconds", d.eager_step_seconds},
                             {"graph_step_seconds", r.cuda_graphs ? nlohmann::json(d.graph_step_seconds) : nullptr},
                             {"kv_bytes", d.kv_bytes},
                             {"floor_seconds", d.floor_seconds},
                             {"components", components_json(d.components)}});
  for (const auto& x : r.restore)
    out["restore"].push_back({{"codec", std::string(codec_name(x.codec))},
                              {"prompt", x.prompt},
                              {"prefix", x.prefix},
                              {"restored_seconds", x.restored_seconds},
                              {"recompute_seconds", x.recompute_seconds},
                              {"logits_relative_error", x.logits_relative_error},
                              {"same_next_token", x.same_next_token}});
  return out.dump(2);
}

std::string to_json(const TpBenchReport& r) {
  const double n = r.tp_size;
  nlohmann::json out = {{"tp_size", r.tp_size},
                        {"collective", std::string(tp_collective_name(r.collective))},
                        {"devices", r.devices},
                        {"gpus", r.gpus},
                        {"weight_bytes", r.weight_bytes},
                        {"peer_copy_bytes_per_s", r.peer_copy_bytes_per_s},
                        {"one_gpu_note", r.one_gpu_note},
                        {"rows", nlohmann::json::array()}};
  for (const auto& row : r.rows) {
    const double algbw =
        row.all_reduce_seconds > 0 ? static_cast<double>(row.all_reduce_bytes) / row.all_reduce_seconds : 0.0;
    out["rows"].push_back({{"kind", row.decode ? "decode" : "prefill"},
                           {"tokens", row.tokens},
                           {"context", row.context},
                           {"seconds", row.seconds},
                           {"one_gpu_seconds", row.one_gpu_seconds > 0 ? nlohmann::json(row.one_gpu_seconds) : nullptr},
                           {"speedup", row.one_gpu_seconds > 0 ? nlohmann::json(row.one_gpu_seconds / row.seconds)
                                                               : nullptr},
                           {"all_reduce",
                            {{"bytes", row.all_reduce_bytes},
                             {"seconds", row.all_reduce_seconds},
                             {"per_pass", row.all_reduces},
                             {"share_of_pass", row.all_reduces * row.all_reduce_seconds / row.seconds},
                             {"algbw_bytes_per_s", algbw},
                             {"busbw_bytes_per_s", algbw * 2 * (n - 1) / n}}}});
  }
  out["restore"] = nlohmann::json::array();
  for (const auto& x : r.restore) {
    const double per_rank = static_cast<double>(x.bytes) / n;
    const auto rate = [](double bytes, double seconds) { return seconds > 0 ? bytes / seconds : 0.0; };
    out["restore"].push_back({{"codec", std::string(codec_name(x.codec))},
                              {"tokens", x.tokens},
                              {"seconds", x.seconds},
                              {"bytes", x.bytes},
                              {"bytes_per_s", rate(static_cast<double>(x.bytes), x.seconds)},
                              {"per_rank_bytes_per_s", rate(per_rank, x.seconds)},
                              {"copy_seconds", x.copy_seconds},
                              {"copy_bytes_per_s", rate(per_rank, x.copy_seconds)},
                              {"ratio_to_copy", rate(x.copy_seconds, x.seconds)}});
  }
  return out.dump(2);
}

}  // namespace hiq
