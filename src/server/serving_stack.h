// server/serving_stack.h — everything `hiq serve` runs, built from a model
// directory and the cache flags, and torn down in the right order.
//
// Two parts. A ServingModel is what depends only on the model directory and
// the device: the checkpoint and its weights (on the GPU for --device cuda),
// the tokenizer when the directory has one (tokenizer.json; otherwise the
// server runs in token-id mode), the EOS ids and the served name. A
// ServingStack adds the L1 pool, the L2 pool and its transfer engine, the
// radix cache, the model runner and the serving engine thread.
//
// Tensor parallelism (tp_size > 1, CPU only): the stack splits the model over
// tp_size ranks (CpuTpModel), gives each rank an L1 pool of its KV heads with
// --max-total-tokens slots, and one host pool holding every rank's records
// (memory/host_kv_pool.h); one radix tree and one scheduler decide for all
// ranks, allocating from rank 0's pool. Stacks of
// different cache configurations can share one ServingModel, one after the
// other, so a benchmark loads a large checkpoint once.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "cache/radix_cache.h"
#include "core/status.h"
#include "engine/serving_engine.h"
#include "memory/host_kv_pool.h"
#include "model/cuda_model_options.h"
#include "server/model_files.h"
#include "storage/storage_options.h"

namespace hiq {

class Tokenizer;
class ChatTemplate;
class LoadedModel;
class CudaModel;
class CudaTpModel;
class CpuTpModel;
class CudaDemoter;

// Where a ladder's demotions run (--hicache-demotion-device).
enum class DemotionDevice : uint8_t {
  kAuto,  // the GPU when serving on one, else host threads
  kCpu,   // host threads
  kGpu,   // the GPU (transfer/cuda_demoter.h); device cuda only
};
std::string_view demotion_device_name(DemotionDevice device);
Result<DemotionDevice> parse_demotion_device(std::string_view name);  // auto, cpu, gpu

struct ServeConfig {
  static constexpr int kMaxTpSize = 256;  // tp_size's bound: a thread per rank
  std::string model_dir;            // --model: config.json, *.safetensors[, tokenizer.json]
  std::string device = "cpu";       // --device: cpu or cuda
  size_t max_total_tokens = 0;      // --max-total-tokens: L1 slots; 0: 8,192 on cpu, 65,536 on cuda
  int64_t context_length = 0;       // --context-length: the longest prompt + output; 0: the model's
                                    // (ModelConfig::context_length); above it, used with a warning
  int page_size = 1;                // --page-size
  bool hicache = true;              // false: --no-hicache (L1 only)
  HostKvPoolOptions host;           // --hicache-codec, --record-align, --hicache-size / --hicache-ratio
  RadixCacheOptions cache;          // --hicache-write-policy, --hicache-demotion-threads
  DemotionDevice demotion_device = DemotionDevice::kAuto;  // --hicache-demotion-device
  SchedulerOptions scheduler;       // --max-prefill-tokens, --max-running-requests
  int transfer_workers = 2;         // CPU transfer engine threads
  int cpu_threads = 0;              // --cpu-threads: the CPU forward pass's threads (process-wide); 0: every core
  int tp_size = 1;                  // --tp-size: tensor-parallel ranks, a thread each (cuda: a GPU each)
  std::vector<int> tp_devices;      // --tp-devices: rank r's GPU (cuda); empty: rank r on GPU r
  TpCollective tp_collective = TpCollective::kNccl;  // --tp-collective (cuda): nccl or peer
  CudaModelOptions cuda;            // --device cuda: --disable-cuda-graph, --cuda-graph-max-bs
  StorageOptions storage;           // --hicache-storage-backend, -backend-extra-config, -prefetch-policy
  int storage_block_tokens = 0;     // --hicache-storage-block-tokens: tokens per stored block, whole pages;
                                    // 0: default_storage_block_tokens() of the backend and the L2 codec
  std::string model_fingerprint;    // --model-fingerprint; empty: model_identity() of the directory
  std::string served_model_name;    // --served-model-name; empty: the directory's name
  std::string chat_template_file;   // --chat-template: a Jinja file (or a JSON with "chat_template"); empty: the model's

  // Errors (kInvalidArgument) start with the field's name ("page_size must
  // be ..."), so a caller can say which flag it came from.
  Status validate() const;
  // The GPU ranks' placement and collective, and each rank's model options.
  CudaTpOptions tp_options() const {
    CudaTpOptions o;
    o.devices = tp_devices;
    o.collective = tp_collective;
    o.model = cuda;
    return o;
  }
};

// The model half of a stack. Immutable once loaded; a stack using it reads
// the weights, so it must outlive every stack built on it (they hold it by
// shared_ptr).
class ServingModel {
 public:
  // Reads config.model_dir (and uploads the weights for config.device).
  // Errors name what failed: the model directory (its files and fields), the
  // tokenizer, or the device (kUnavailable without a GPU).
  static Result<std::shared_ptr<ServingModel>> load(const ServeConfig& config);
  ~ServingModel();

  const std::string& device() const { return device_; }
  const LoadedModel& checkpoint() const { return *model_; }
  // Null on the CPU, and under tensor parallelism (cuda_tp_model()).
  CudaModel* cuda_model() const { return cuda_model_.get(); }
  // The model split over the GPUs of --tp-size above 1 (device cuda); else null.
  CudaTpModel* cuda_tp_model() const { return cuda_tp_model_.get(); }
  // Null when the model directory has no tokenizer.json (token-id mode).
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  // The chat template: --chat-template's, else the model directory's
  // (chat_template.jinja or tokenizer_config.json), else ChatML where the
  // tokenizer has its tokens; null otherwise (chat requests get a 400).
  const ChatTemplate* chat_template() const { return chat_template_.get(); }
  // generation_config.json's sampling defaults and end-of-sequence ids.
  const GenerationConfig& generation_config() const { return generation_; }
  // What the tokenizer puts before a text prompt (add_special_tokens).
  const std::vector<int32_t>& prompt_prefix() const { return prompt_prefix_; }
  const std::string& name() const { return name_; }
  int vocab_size() const { return vocab_size_; }
  // Tokens that end generation unless a request sets ignore_eos
  // (GenerationConfig::eos_token_ids).
  const std::vector<int32_t>& eos_token_ids() const { return generation_.eos_token_ids; }

 private:
  ServingModel() = default;

  std::string device_, name_;
  int vocab_size_ = 0;
  GenerationConfig generation_;
  std::vector<int32_t> prompt_prefix_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> chat_template_;
  std::unique_ptr<LoadedModel> model_;
  std::unique_ptr<CudaModel> cuda_model_;
  std::unique_ptr<CudaTpModel> cuda_tp_model_;
};

class ServingStack {
 public:
  // Loads the model, then builds the rest. Errors: those of
  // ServingModel::load, and the pools' (a budget too small, no memory).
  static Result<std::unique_ptr<ServingStack>> create(const ServeConfig& config);
  // Builds the cache and the engine of `config` on a model already loaded
  // (config.model_dir, device and served_model_name are not read again).
  static Result<std::unique_ptr<ServingStack>> create(const ServeConfig& config,
                                                      std::shared_ptr<const ServingModel> model);
  ~ServingStack();

  ServingEngine& engine() { return *serving_; }
  const ServingModel& model() const { return *model_; }
  const Tokenizer* tokenizer() const { return model_->tokenizer(); }
  const std::string& model_name() const { return model_->name(); }
  int vocab_size() const { return model_->vocab_size(); }
  const std::vector<int32_t>& eos_token_ids() const { return model_->eos_token_ids(); }
  // The longest prompt + output a request can have: L1's slots, at most the
  // context length (ServeConfig::context_length, else the model's).
  size_t context_tokens() const { return std::min(l1_slots(), context_length_); }
  size_t l1_slots() const { return l1_->num_slots(); }
  // L2 capacity in tokens (0 without a host tier); its use is in engine().stats().
  size_t host_capacity_tokens() const { return l2_ ? l2_->capacity_tokens() : 0; }
  // The host tier, or null without one.
  const HostKvPool* host_pool() const { return l2_.get(); }
  const std::string& device() const { return model_->device(); }
  // Tensor-parallel ranks (1 without tensor parallelism).
  int tp_size() const { return 1 + static_cast<int>(other_ranks_l1_.size()); }
  // A ladder's demotions: where they ran and what they did (thread-safe).
  struct DemotionReport {
    std::string device;            // "gpu" or "cpu"; empty without a ladder
    DemotionStats stats;           // the demotion engine's
    uint64_t gpu_failed_jobs = 0;  // GPU demotion only: jobs whose GPU part failed, done on the host
  };
  DemotionReport demotion_report() const;

 private:
  ServingStack() = default;

  size_t context_length_ = 0;  // ServeConfig::context_length, or the model's
  // Declared in dependency order, destroyed in reverse.
  std::shared_ptr<const ServingModel> model_;
  std::unique_ptr<CpuTpModel> tp_model_;                       // tp_size > 1 on the CPU: the split model
  std::unique_ptr<DeviceKvPool> l1_;                           // rank 0's: the tree allocates its slots
  std::vector<std::unique_ptr<DeviceKvPool>> other_ranks_l1_;  // ranks 1 … tp_size-1, the same slots
  std::unique_ptr<HostKvPool> l2_;
  std::shared_ptr<CudaDemoter> demoter_;  // a ladder demoting on the GPU; the cache's engine shares it
  std::unique_ptr<TransferEngine> transfer_;
  std::unique_ptr<RadixCache> cache_;
  std::unique_ptr<StorageTier> storage_;  // destroyed after serving_ (whose thread uses it), before cache_
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<ServingEngine> serving_;
};

}  // namespace hiq
