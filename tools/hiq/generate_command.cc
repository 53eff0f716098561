// `hiq generate`: greedy generation from token ids with a Hugging Face model
// directory, on the CPU or the CUDA backend; the top-K log-probabilities at
// each step, or every logit, on request.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <numeric>

#include <nlohmann/json.hpp>

#include "memory/cuda_device_kv_pool.h"
#include "model/cuda_model.h"
#include "model/loaded_model.h"
#include "server/model_files.h"
#include "tokenizer/tokenizer.h"
#include "tools/hiq/commands.h"
#include "tools/hiq/cuda_graph_flags.h"
#include "tools/hiq/list_flag.h"
#include "tools/hiq/table.h"

namespace hiq::cli {
namespace {

struct GenerateFlags {
  std::string model;
  std::string device = "cpu";
  std::string prompt_ids;
  std::string prompt;
  int max_new_tokens = 16;
  int logprobs = 0;
  std::string logits_out;
  CudaModelOptions cuda;
  bool json = false;
};

// One greedy step: the logits after the last token (empty when not asked for)
// and the argmax.
struct Step {
  std::vector<float> logits;
  int32_t next = 0;
};
using StepFn = std::function<Result<Step>(std::span<const int32_t> tokens, std::span<const SlotId> slots,
                                          size_t first_new)>;

// The forward pass of `device` over `m`, with an L1 pool of `slots` tokens.
Result<StepFn> make_step(const LoadedModel& m, const std::string& device, const CudaModelOptions& options, size_t slots,
                         bool want_logits) {
  if (device == "cpu") {
    HIQ_ASSIGN_OR_RETURN(std::shared_ptr<DeviceKvPool> l1, make_host_memory_device_pool(m.config().kv_geometry(), slots));
    return StepFn([&m, l1](std::span<const int32_t> tokens, std::span<const SlotId> s, size_t first_new) -> Result<Step> {
      HIQ_ASSIGN_OR_RETURN(std::vector<float> logits, cpu_forward(m.shape(), m.weights(), *l1, tokens, s, first_new));
      const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      return Step{std::move(logits), next};
    });
  }
  if (device != "cuda") return invalid_argument("--device must be cpu or cuda");
  HIQ_ASSIGN_OR_RETURN(std::shared_ptr<CudaModel> model, make_cuda_model(m.shape(), m.weights(), options));
  HIQ_ASSIGN_OR_RETURN(std::shared_ptr<DeviceKvPool> l1, make_cuda_device_kv_pool(m.config().kv_geometry(), slots));
  return StepFn([model, l1, want_logits](std::span<const int32_t> tokens, std::span<const SlotId> s,
                                         size_t first_new) -> Result<Step> {
    const ModelSequence seq{tokens, s, first_new};
    HIQ_ASSIGN_OR_RETURN(ModelOutput out, model->forward(*l1, std::span(&seq, 1),
                                                         want_logits ? LogitsWanted::kLast : LogitsWanted::kNone));
    return Step{std::move(out.logits), out.next_tokens[0]};
  });
}

// A prompt is a sequence: the same id may come twice.
Result<std::vector<int32_t>> parse_ids(const std::string& list) {
  HIQ_ASSIGN_OR_RETURN(const std::vector<int64_t> ids,
                       parse_integer_list_flag(list, "--prompt-ids", 0, INT32_MAX, ListRepeats::kAllow));
  return std::vector<int32_t>(ids.begin(), ids.end());
}

// The top `k` (id, log-probability) pairs of `logits`, most likely first.
std::vector<std::pair<int, double>> top_logprobs(const std::vector<float>& logits, int k) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - max));
  const double log_total = std::log(sum) + max;
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const auto n = std::min<size_t>(static_cast<size_t>(k), order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
                    [&](int a, int b) { return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)]; });
  std::vector<std::pair<int, double>> out;
  for (size_t i = 0; i < n; ++i) out.push_back({order[i], logits[static_cast<size_t>(order[i])] - log_total});
  return out;
}

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& model_dir) {
  HIQ_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::load(model_dir));
  return std::make_unique<Tokenizer>(std::move(tokenizer));
}

int run_generate(const GenerateFlags& f) {
  if (f.max_new_tokens < 1) return report_error("generate", invalid_argument("--max-new-tokens must be positive"));
  if (f.logprobs < 0) return report_error("generate", invalid_argument("--logprobs must not be negative"));
  if (const Status s = check_cuda_graph_flags(f.cuda); !s.is_ok()) return report_error("generate", s);
  if (f.prompt.empty() == f.prompt_ids.empty())
    return report_error("generate", invalid_argument("give the prompt as --prompt TEXT or as --prompt-ids 1,2,3"));
  // A text prompt goes through the model directory's tokenizer.json, and the
  // output is decoded the same way.
  std::unique_ptr<Tokenizer> tokenizer;
  if (!f.prompt.empty()) {
    auto loaded = load_tokenizer(f.model);
    if (!loaded)
      return report_error("generate", loaded.status().with_context("--prompt needs the model directory's tokenizer"));
    tokenizer = std::move(*loaded);
  }
  auto prompt = tokenizer ? tokenizer->encode(f.prompt) : parse_ids(f.prompt_ids);
  if (!prompt) return report_error("generate", prompt.status());
  if (tokenizer) {  // what the tokenizer puts before a text (a BOS), as hiq serve and transformers do
    auto prefix = read_prompt_prefix(f.model, *tokenizer);
    if (!prefix) return report_error("generate", prefix.status());
    prompt->insert(prompt->begin(), prefix->begin(), prefix->end());
  }
  if (prompt->empty()) return report_error("generate", invalid_argument("--prompt has no tokens"));
  auto model = LoadedModel::load(f.model);
  if (!model) return report_error("generate", model.status());
  const LoadedModel& m = **model;
  for (int32_t id : *prompt)
    if (id >= m.shape().vocab_size)
      return report_error("generate", out_of_range("--prompt-ids: token " + std::to_string(id) +
                                                   " is outside the vocabulary of " +
                                                   std::to_string(m.shape().vocab_size)));

  const size_t total = prompt->size() + static_cast<size_t>(f.max_new_tokens);
  std::FILE* logits_file = nullptr;
  if (!f.logits_out.empty() && (logits_file = std::fopen(f.logits_out.c_str(), "wb")) == nullptr)
    return report_error("generate", invalid_argument("--logits-out: cannot write '" + f.logits_out + "'"));
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> close_logits(logits_file, [](std::FILE* p) {
    return p != nullptr ? std::fclose(p) : 0;
  });
  auto step_fn = make_step(m, f.device, f.cuda, total, f.logprobs > 0 || logits_file != nullptr);
  if (!step_fn) return report_error("generate", step_fn.status());
  std::vector<SlotId> slots(total);
  std::iota(slots.begin(), slots.end(), 0u);

  std::vector<int32_t> tokens = *prompt;
  std::vector<int32_t> output;
  std::vector<std::vector<std::pair<int, double>>> logprobs;
  size_t first_new = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int step = 0; step < f.max_new_tokens; ++step) {
    auto result = (*step_fn)(tokens, std::span(slots).first(tokens.size()), first_new);
    if (!result) return report_error("generate", result.status());
    const int32_t next = result->next;
    if (f.logprobs > 0) logprobs.push_back(top_logprobs(result->logits, f.logprobs));
    if (logits_file != nullptr &&
        std::fwrite(result->logits.data(), sizeof(float), result->logits.size(), logits_file) != result->logits.size())
      return report_error("generate", internal_error("--logits-out: write failed"));
    output.push_back(next);
    first_new = tokens.size();
    tokens.push_back(next);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "hiq generate: %zu prompt + %d new tokens in %.2f s on the %s backend\n", prompt->size(),
               f.max_new_tokens, seconds, f.device.c_str());

  if (f.json) {
    nlohmann::json out = {{"output_ids", output}};
    if (tokenizer) out["text"] = tokenizer->decode(output, /*skip_special=*/true);
    if (f.logprobs > 0) {
      nlohmann::json steps = nlohmann::json::array();
      for (const auto& step : logprobs) {
        nlohmann::json pairs = nlohmann::json::array();
        for (const auto& [id, lp] : step) pairs.push_back({id, lp});
        steps.push_back(pairs);
      }
      out["logprobs"] = steps;
    }
    // Generated bytes need not be valid UTF-8: such sequences print as U+FFFD.
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    return 0;
  }
  Table t(f.logprobs > 0 ? std::vector<std::string>{"step", "token", "top log-probabilities"}
                         : std::vector<std::string>{"step", "token"});
  for (size_t i = 0; i < output.size(); ++i) {
    std::vector<std::string> row = {std::to_string(i), std::to_string(output[i])};
    if (f.logprobs > 0) {
      std::string cell;
      for (const auto& [id, lp] : logprobs[i]) cell += (cell.empty() ? "" : "  ") + std::to_string(id) + ":" + format_fixed(lp, 3);
      row.push_back(cell);
    }
    t.add_row(row);
  }
  t.print(std::cout);
  if (tokenizer) std::cout << '\n' << f.prompt << tokenizer->decode(output, /*skip_special=*/true) << '\n';
  return 0;
}

}  // namespace

Subcommand add_generate_command(CLI::App& parent) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* app = parent.add_subcommand("generate", "Greedy generation with a Hugging Face model directory");
  app->add_option("--model", f->model, "Model directory (config.json and *.safetensors)")->required();
  app->add_option("--device", f->device, "cpu or cuda")->capture_default_str();
  app->add_option("--prompt-ids", f->prompt_ids, "Comma-separated prompt token ids");
  app->add_option("--prompt", f->prompt, "Text prompt (through the model directory's tokenizer.json)");
  app->add_option("--max-new-tokens", f->max_new_tokens, "Tokens to generate")->capture_default_str();
  app->add_option("--logprobs", f->logprobs, "Top-K log-probabilities at each step")->capture_default_str();
  app->add_option("--logits-out", f->logits_out,
                  "Write each step's logits to FILE (float32, [steps][vocab], little-endian)");
  add_cuda_graph_flags(app, f->cuda);
  app->add_flag("--json", f->json, "Print JSON: {\"output_ids\": [...], \"logprobs\": [[[id, logprob], ...], ...]}");
  return {app, [f] { return run_generate(*f); }};
}

}  // namespace hiq::cli
