#include "server/serving_stack.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "core/parallel.h"
#include "core/units.h"
#include "engine/cpu_model_runner.h"
#include "engine/cuda_model_runner.h"
#include "kv/geometry.h"
#include "kv/model_config.h"
#include "memory/cuda_device_kv_pool.h"
#include "model/cuda_model.h"
#include "model/cuda_tp_model.h"
#include "model/loaded_model.h"
#include "model/tensor_parallel.h"
#include "storage/storage_value.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "transfer/cuda_demoter.h"
#include "transfer/cuda_transfer_engine.h"
#include "transfer/transfer_engine.h"

namespace hiq {
namespace {

// See ServingModel::chat_template().
Result<std::unique_ptr<ChatTemplate>> load_chat_template(const ServeConfig& c, const Tokenizer& tokenizer) {
  if (!c.chat_template_file.empty()) {
    HIQ_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::load_file(c.chat_template_file, c.model_dir));
    return std::make_unique<ChatTemplate>(std::move(t));
  }
  Result<ChatTemplate> own = ChatTemplate::load(c.model_dir);
  if (own.is_ok()) return std::make_unique<ChatTemplate>(std::move(*own));
  if (own.status().code() != StatusCode::kNotFound) return own.status();
  if (tokenizer.token_id("<|im_start|>") && tokenizer.token_id("<|im_end|>"))
    return std::make_unique<ChatTemplate>(ChatTemplate::chatml());
  return std::unique_ptr<ChatTemplate>();
}

}  // namespace

std::string_view demotion_device_name(DemotionDevice device) {
  switch (device) {
    case DemotionDevice::kAuto: return "auto";
    case DemotionDevice::kCpu: return "cpu";
    case DemotionDevice::kGpu: return "gpu";
  }
  return "?";
}

Result<DemotionDevice> parse_demotion_device(std::string_view name) {
  for (DemotionDevice d : {DemotionDevice::kAuto, DemotionDevice::kCpu, DemotionDevice::kGpu})
    if (name == demotion_device_name(d)) return d;
  return invalid_argument("demotion_device must be auto, cpu or gpu, not '" + std::string(name) + "'");
}

Status ServeConfig::validate() const {
  if (model_dir.empty()) return invalid_argument("model_dir must name a model directory");
  if (context_length < 0) return invalid_argument("context_length must not be negative (0: the model's)");
  if (device != "cpu" && device != "cuda") return invalid_argument("device must be cpu or cuda, not '" + device + "'");
  if (page_size < 1 || page_size > kMaxPageSize)
    return invalid_argument("page_size must be in [1, " + std::to_string(kMaxPageSize) + "], got " +
                            std::to_string(page_size));
  if (max_total_tokens != 0 && max_total_tokens < static_cast<size_t>(page_size))
    return invalid_argument("max_total_tokens must hold at least one page (" + std::to_string(page_size) +
                            " tokens), got " + std::to_string(max_total_tokens));
  HIQ_RETURN_IF_ERROR(scheduler.validate());
  if (transfer_workers < 1 || transfer_workers > 256) return invalid_argument("transfer_workers must be in [1, 256]");
  if (cpu_threads < 0 || cpu_threads > 1024) return invalid_argument("cpu_threads must be in [0, 1024] (0: every core)");
  if (tp_size < 1 || tp_size > kMaxTpSize)
    return invalid_argument("tp_size must be in [1, " + std::to_string(kMaxTpSize) + "], got " +
                            std::to_string(tp_size));
  if (!tp_devices.empty() && tp_size == 1)
    return invalid_argument("tp_devices place tensor-parallel ranks: they need tp_size above 1");
  if (device == "cuda") {
    const Status tp = tp_options().validate(tp_size);
    if (!tp.is_ok() && tp.message().starts_with("devices")) return invalid_argument("tp_" + tp.message());
    HIQ_RETURN_IF_ERROR(tp);
  } else {
    HIQ_RETURN_IF_ERROR(cuda.validate());
    if (!tp_devices.empty()) return invalid_argument("tp_devices places ranks on GPUs: it needs device cuda");
    if (demotion_device == DemotionDevice::kGpu)
      return invalid_argument("demotion_device gpu demotes on the serving GPU, so it needs device cuda");
  }
  if (storage.backend != StorageBackendKind::kNone) {
    if (!hicache) return invalid_argument("storage needs the host tier: its blocks are L2 records");
    if (storage_block_tokens < 0 || storage_block_tokens % page_size != 0)
      return invalid_argument("storage_block_tokens must be 0 (by backend) or a positive multiple of page_size (" +
                              std::to_string(page_size) + "), got " + std::to_string(storage_block_tokens));
    HIQ_RETURN_IF_ERROR(storage.validate().with_context("storage"));
  }
  return Status::ok();
}

ServingModel::~ServingModel() = default;

Result<std::shared_ptr<ServingModel>> ServingModel::load(const ServeConfig& c) {
  HIQ_RETURN_IF_ERROR(c.validate());
  auto m = std::shared_ptr<ServingModel>(new ServingModel());
  m->device_ = c.device;
  HIQ_ASSIGN_OR_RETURN(m->model_, LoadedModel::load(c.model_dir));
  m->vocab_size_ = m->model_->shape().vocab_size;
  m->name_ = c.served_model_name.empty()
                 ? std::filesystem::path(c.model_dir).lexically_normal().filename().string()
                 : c.served_model_name;
  if (m->name_.empty() || m->name_ == ".")
    m->name_ = std::filesystem::absolute(c.model_dir).lexically_normal().parent_path().filename().string();
  const std::filesystem::path tokenizer_path = std::filesystem::path(c.model_dir) / "tokenizer.json";
  if (std::filesystem::exists(tokenizer_path)) {
    HIQ_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::load(tokenizer_path.string()));
    if (tokenizer.vocab_size() > static_cast<size_t>(m->vocab_size_))
      return invalid_argument(tokenizer_path.string() + " has ids up to " + std::to_string(tokenizer.vocab_size()) +
                              ", beyond the model's vocabulary of " + std::to_string(m->vocab_size_));
    m->tokenizer_ = std::make_unique<Tokenizer>(std::move(tokenizer));
    HIQ_ASSIGN_OR_RETURN(m->prompt_prefix_, read_prompt_prefix(c.model_dir, *m->tokenizer_));
    HIQ_ASSIGN_OR_RETURN(m->chat_template_, load_chat_template(c, *m->tokenizer_));
  } else if (!c.chat_template_file.empty()) {
    return invalid_argument("--chat-template needs a tokenizer.json in the model directory");
  }
  HIQ_ASSIGN_OR_RETURN(m->generation_, read_generation_config(c.model_dir, m->tokenizer_.get()));
  for (int32_t id : m->generation_.eos_token_ids)
    if (id >= m->vocab_size_)
      return invalid_argument(c.model_dir + ": eos_token_id " + std::to_string(id) + " (from generation_config.json, " +
                              "config.json or tokenizer_config.json's eos_token) is outside the vocabulary of " +
                              std::to_string(m->vocab_size_));
  if (c.device == "cuda" && c.tp_size > 1) {
    HIQ_ASSIGN_OR_RETURN(m->cuda_tp_model_,
                         make_cuda_tp_model(m->model_->shape(), m->model_->weights(), c.tp_size, c.tp_options()));
  } else if (c.device == "cuda") {
    HIQ_ASSIGN_OR_RETURN(m->cuda_model_, make_cuda_model(m->model_->shape(), m->model_->weights(), c.cuda));
  }
  return m;
}

ServingStack::~ServingStack() {
  // The engine thread first: it uses everything below. Then the storage
  // tier, which unregisters itself from the cache as it goes.
  serving_.reset();
  storage_.reset();
  runner_.reset();
  cache_.reset();
  transfer_.reset();
}

ServingStack::DemotionReport ServingStack::demotion_report() const {
  DemotionReport r;
  const DemotionEngine* engine = cache_->demotion_engine();
  if (engine == nullptr) return r;
  r.device = demoter_ ? "gpu" : "cpu";
  r.stats = engine->stats();
  if (demoter_) r.gpu_failed_jobs = demoter_->stats().host_jobs;
  return r;
}

namespace {

// The KV geometry of one tensor-parallel rank of `m`, the one its L1 pool has.
Result<KvGeometry> rank_geometry(const LoadedModel& m, int page_size, int tp_size) {
  GeometryOptions options;
  options.page_size = page_size;
  options.tp_size = tp_size;
  const ModelConfig& c = m.config();
  return mha_kv_geometry(c.source, c.num_layers, c.num_kv_heads, c.head_dim, options);
}

}  // namespace

Result<std::unique_ptr<ServingStack>> ServingStack::create(const ServeConfig& c) {
  HIQ_ASSIGN_OR_RETURN(std::shared_ptr<ServingModel> model, ServingModel::load(c));
  return create(c, std::move(model));
}

Result<std::unique_ptr<ServingStack>> ServingStack::create(const ServeConfig& c,
                                                           std::shared_ptr<const ServingModel> model) {
  HIQ_RETURN_IF_ERROR(c.validate());
  auto s = std::unique_ptr<ServingStack>(new ServingStack());
  s->model_ = std::move(model);
  const LoadedModel& m = s->model_->checkpoint();
  const int64_t model_context = m.config().context_length();
  if (c.context_length > model_context)
    log(LogLevel::kWarning, "serve",
        "--context-length " + std::to_string(c.context_length) + " is above the model's " +
            std::to_string(model_context) + " (max_position_embeddings): positions past it were not trained for");
  s->context_length_ = static_cast<size_t>(c.context_length > 0 ? c.context_length : model_context);
  const bool cuda = s->model_->device() == "cuda";
  if (!cuda && c.cpu_threads > 0) set_parallel_threads(c.cpu_threads);
  const size_t slots = c.max_total_tokens > 0 ? c.max_total_tokens : (cuda ? 65536 : 8192);
  KvGeometry geometry = m.config().kv_geometry(c.page_size);
  CudaTpModel* cuda_tp = s->model_->cuda_tp_model();  // split over GPUs (made by ServingModel::load)
  if (c.tp_size > 1) {
    // The split's error names what tp_size does not divide.
    if (!cuda) {
      HIQ_ASSIGN_OR_RETURN(s->tp_model_, CpuTpModel::create(m.shape(), m.weights(), c.tp_size));
    }
    HIQ_ASSIGN_OR_RETURN(geometry, rank_geometry(m, c.page_size, c.tp_size));
  }
  std::vector<int> devices;  // each rank's GPU (tensor parallelism on GPUs)
  if (cuda_tp) {
    for (int r = 0; r < cuda_tp->size(); ++r) devices.push_back(cuda_tp->device(r));
    HIQ_ASSIGN_OR_RETURN(s->l1_, make_cuda_device_kv_pool(devices[0], geometry, slots));
    for (int r = 1; r < cuda_tp->size(); ++r) {
      HIQ_ASSIGN_OR_RETURN(std::unique_ptr<DeviceKvPool> pool,
                           make_cuda_device_kv_pool(devices[static_cast<size_t>(r)], geometry, slots));
      s->other_ranks_l1_.push_back(std::move(pool));
    }
  } else if (cuda) {
    HIQ_ASSIGN_OR_RETURN(s->l1_, make_cuda_device_kv_pool(geometry, slots));
  } else {
    HIQ_ASSIGN_OR_RETURN(s->l1_, make_host_memory_device_pool(geometry, slots));
    for (int r = 1; r < c.tp_size; ++r) {
      HIQ_ASSIGN_OR_RETURN(std::unique_ptr<DeviceKvPool> pool, make_host_memory_device_pool(geometry, slots));
      s->other_ranks_l1_.push_back(std::move(pool));
    }
  }
  std::vector<DeviceKvPool*> rank_pools = {s->l1_.get()};
  for (const auto& pool : s->other_ranks_l1_) rank_pools.push_back(pool.get());
  CudaTransferEngine* cuda_transfer = nullptr;
  CudaTpTransferEngine* cuda_tp_transfer = nullptr;
  if (c.hicache) {
    // Every rank's records in one pool, its capacity from all of their bytes per token.
    HIQ_ASSIGN_OR_RETURN(s->l2_, HostKvPool::create(tp_host_geometry(geometry), c.host, slots));
    if (s->l2_->capacity_tokens() < slots)
      log(LogLevel::kWarning, "serve",
          "the host tier holds " + std::to_string(s->l2_->capacity_tokens()) + " tokens, fewer than L1's " +
              std::to_string(slots) + ": once L2 is full of KV that L1 also holds, backups are skipped "
              "(hiq:backup_skipped_tokens_total) and that KV never reaches L2 or storage; give L2 at least L1's "
              "tokens (--hicache-ratio ≥ 1)");
    TransferEngineOptions options;
    options.workers = c.transfer_workers;
    if (cuda_tp) {
      HIQ_ASSIGN_OR_RETURN(std::unique_ptr<CudaTpTransferEngine> engine,
                           make_cuda_tp_transfer_engine(rank_pools, devices, *s->l2_, options));
      cuda_tp_transfer = engine.get();
      s->transfer_ = std::move(engine);
    } else if (cuda) {
      HIQ_ASSIGN_OR_RETURN(std::unique_ptr<CudaTransferEngine> engine, make_cuda_transfer_engine(*s->l1_, *s->l2_, options));
      cuda_transfer = engine.get();
      s->transfer_ = std::move(engine);
    } else {
      HIQ_ASSIGN_OR_RETURN(s->transfer_, make_cpu_transfer_engine(rank_pools, *s->l2_, options));
    }
  }
  RadixCacheOptions cache_options = c.cache;
  if (c.demotion_device != DemotionDevice::kAuto && !(s->l2_ && s->l2_->tiered()))
    log(LogLevel::kWarning, "serve",
        "--hicache-demotion-device " + std::string(demotion_device_name(c.demotion_device)) +
            " has nothing to do: the host tier has no ladder (--hicache-codec tiered:…)");
  if (cuda && s->l2_ && s->l2_->tiered() && c.demotion_device != DemotionDevice::kCpu) {
    CudaDemoterOptions options;
    options.device = devices.empty() ? -1 : devices[0];
    Result<std::shared_ptr<CudaDemoter>> demoter = make_cuda_demoter(*s->l2_, options);
    if (!demoter && c.demotion_device == DemotionDevice::kGpu) return demoter.status().with_context("GPU demotion");
    if (demoter) {
      s->demoter_ = std::move(*demoter);
      cache_options.demotion_backend = demotion_backend(s->demoter_);
    } else {
      log(LogLevel::kWarning, "serve", "demoting on host threads: " + demoter.status().to_string());
    }
  }
  s->cache_ = std::make_unique<RadixCache>(*s->l1_, s->l2_.get(), s->transfer_.get(), std::move(cache_options));
  if (c.storage.backend != StorageBackendKind::kNone) {
    HIQ_ASSIGN_OR_RETURN(std::unique_ptr<StorageBackend> backend, make_storage_backend(c.storage));
    std::string identity = c.model_fingerprint;
    if (identity.empty()) {
      HIQ_ASSIGN_OR_RETURN(identity, model_identity(c.model_dir));
    }
    StorageTierOptions options;
    options.storage = c.storage;
    const int block_tokens = c.storage_block_tokens > 0
                                 ? c.storage_block_tokens
                                 : default_storage_block_tokens(c.storage.backend, s->l2_->bytes_per_token(),
                                                                c.page_size);
    // Under tensor parallelism a block holds every rank's records, as the
    // host pool does: its fingerprint is the pool's (tp_size ranks of the
    // rank's KV heads over tp_size × the layers), so servers of different
    // tensor-parallel sizes never share a block.
    HIQ_ASSIGN_OR_RETURN(s->storage_,
                         StorageTier::create(*s->cache_, *s->l2_, std::move(backend),
                                             make_storage_fingerprint(tp_host_geometry(geometry), c.host.codec,
                                                                      c.host.record_align, block_tokens, identity),
                                             options));
    log(LogLevel::kInfo, "serve",
        "storage: " + std::string(storage_backend_name(c.storage.backend)) + ", blocks of " +
            std::to_string(block_tokens) + " tokens (" +
            format_bytes(static_cast<uint64_t>(block_tokens) * s->l2_->bytes_per_token() + kStorageHeaderBytes) +
            " values), " + s->storage_->fingerprint().describe());
  }
  if (cuda_tp) s->runner_ = std::make_unique<CudaModelRunner>(*cuda_tp, rank_pools, cuda_tp_transfer);
  else if (cuda) s->runner_ = std::make_unique<CudaModelRunner>(*s->model_->cuda_model(), *s->l1_, cuda_transfer);
  else if (s->tp_model_)
    s->runner_ = std::make_unique<CpuModelRunner>(*s->tp_model_, rank_pools, s->transfer_.get());
  else s->runner_ = std::make_unique<CpuModelRunner>(m.shape(), m.weights(), *s->l1_, s->transfer_.get());
  s->serving_ = std::make_unique<ServingEngine>(*s->cache_, *s->l1_, s->transfer_.get(), *s->runner_, c.scheduler,
                                                s->l2_.get(), s->storage_.get());
  return Result<std::unique_ptr<ServingStack>>(std::move(s));
}

}  // namespace hiq
