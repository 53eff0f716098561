#include "server/serving_stack.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/cpu_model_runner.h"
#include "engine/cuda_model_runner.h"
#include "memory/cuda_device_kv_pool.h"
#include "model/cuda_model.h"
#include "model/loaded_model.h"
#include "tokenizer/tokenizer.h"
#include "transfer/cuda_transfer_engine.h"
#include "transfer/transfer_engine.h"

namespace hiq {
namespace {

// eos_token_id of DIR/generation_config.json, else of DIR/config.json: an id
// or a list of ids; none when neither file has it.
Result<std::vector<int32_t>> read_eos(const std::string& dir) {
  for (const char* name : {"generation_config.json", "config.json"}) {
    const std::filesystem::path path = std::filesystem::path(dir) / name;
    std::ifstream in(path);
    if (!in) continue;
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return invalid_argument(path.string() + ": not valid JSON");
    if (!j.contains("eos_token_id") || j["eos_token_id"].is_null()) continue;
    const nlohmann::json& eos = j["eos_token_id"];
    std::vector<int32_t> ids;
    for (const nlohmann::json& id : eos.is_array() ? eos : nlohmann::json::array({eos})) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
        return invalid_argument(path.string() + ": eos_token_id must be a token id or a list of them");
      ids.push_back(id.get<int32_t>());
    }
    return ids;
  }
  return std::vector<int32_t>{};
}

}  // namespace

ServingModel::~ServingModel() = default;

Result<std::shared_ptr<ServingModel>> ServingModel::load(const ServeConfig& c) {
  if (c.device != "cpu" && c.device != "cuda") return invalid_argument("--device must be cpu or cuda");
  auto m = std::shared_ptr<ServingModel>(new ServingModel());
  m->device_ = c.device;
  HIQ_ASSIGN_OR_RETURN(m->model_, LoadedModel::load(c.model_dir));
  m->vocab_size_ = m->model_->shape().vocab_size;
  m->name_ = c.served_model_name.empty()
                 ? std::filesystem::path(c.model_dir).lexically_normal().filename().string()
                 : c.served_model_name;
  if (m->name_.empty() || m->name_ == ".")
    m->name_ = std::filesystem::absolute(c.model_dir).lexically_normal().parent_path().filename().string();
  HIQ_ASSIGN_OR_RETURN(m->eos_, read_eos(c.model_dir));
  for (int32_t id : m->eos_)
    if (id >= m->vocab_size_)
      return invalid_argument("eos_token_id " + std::to_string(id) + " is outside the vocabulary of " +
                              std::to_string(m->vocab_size_));

  const std::filesystem::path tokenizer_path = std::filesystem::path(c.model_dir) / "tokenizer.json";
  if (std::filesystem::exists(tokenizer_path)) {
    HIQ_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::load(tokenizer_path.string()));
    if (tokenizer.vocab_size() > static_cast<size_t>(m->vocab_size_))
      return invalid_argument(tokenizer_path.string() + " has ids up to " + std::to_string(tokenizer.vocab_size()) +
                              ", beyond the model's vocabulary of " + std::to_string(m->vocab_size_));
    m->tokenizer_ = std::make_unique<Tokenizer>(std::move(tokenizer));
  }
  if (c.device == "cuda") {
    HIQ_ASSIGN_OR_RETURN(m->cuda_model_, make_cuda_model(m->model_->shape(), m->model_->weights()));
  }
  return m;
}

ServingStack::~ServingStack() {
  // The engine thread first: it uses everything below.
  serving_.reset();
  runner_.reset();
  cache_.reset();
  transfer_.reset();
}

Result<std::unique_ptr<ServingStack>> ServingStack::create(const ServeConfig& c) {
  HIQ_ASSIGN_OR_RETURN(std::shared_ptr<ServingModel> model, ServingModel::load(c));
  return create(c, std::move(model));
}

Result<std::unique_ptr<ServingStack>> ServingStack::create(const ServeConfig& c,
                                                           std::shared_ptr<const ServingModel> model) {
  auto s = std::unique_ptr<ServingStack>(new ServingStack());
  s->model_ = std::move(model);
  const LoadedModel& m = s->model_->checkpoint();
  const bool cuda = s->model_->device() == "cuda";
  const size_t slots = c.max_total_tokens > 0 ? c.max_total_tokens : (cuda ? 65536 : 8192);
  const KvGeometry geometry = m.config().kv_geometry(c.page_size);
  if (cuda) {
    HIQ_ASSIGN_OR_RETURN(s->l1_, make_cuda_device_kv_pool(geometry, slots));
  } else {
    HIQ_ASSIGN_OR_RETURN(s->l1_, make_host_memory_device_pool(geometry, slots));
  }
  CudaTransferEngine* cuda_transfer = nullptr;
  if (c.hicache) {
    HIQ_ASSIGN_OR_RETURN(s->l2_, HostKvPool::create(geometry, c.host, slots));
    TransferEngineOptions options;
    options.workers = c.transfer_workers;
    if (cuda) {
      HIQ_ASSIGN_OR_RETURN(std::unique_ptr<CudaTransferEngine> engine, make_cuda_transfer_engine(*s->l1_, *s->l2_, options));
      cuda_transfer = engine.get();
      s->transfer_ = std::move(engine);
    } else {
      HIQ_ASSIGN_OR_RETURN(s->transfer_, make_cpu_transfer_engine(*s->l1_, *s->l2_, options));
    }
  }
  s->cache_ = std::make_unique<RadixCache>(*s->l1_, s->l2_.get(), s->transfer_.get(), c.cache);
  if (cuda) s->runner_ = std::make_unique<CudaModelRunner>(*s->model_->cuda_model(), *s->l1_, cuda_transfer);
  else s->runner_ = std::make_unique<CpuModelRunner>(m.shape(), m.weights(), *s->l1_, s->transfer_.get());
  s->serving_ = std::make_unique<ServingEngine>(*s->cache_, *s->l1_, s->transfer_.get(), *s->runner_, c.scheduler,
                                                s->l2_.get());
  return Result<std::unique_ptr<ServingStack>>(std::move(s));
}

}  // namespace hiq
