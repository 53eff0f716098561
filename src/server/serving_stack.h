// server/serving_stack.h — everything `hiq serve` runs, built from a model
// directory and the cache flags, and torn down in the right order: the
// checkpoint and its weights (on the GPU for --device cuda), the L1 pool, the
// L2 pool and its transfer engine, the radix cache, the model runner and the
// serving engine thread, plus the tokenizer when the directory has one
// (tokenizer.json; otherwise the server runs in token-id mode).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cache/radix_cache.h"
#include "core/status.h"
#include "engine/serving_engine.h"
#include "memory/host_kv_pool.h"

namespace hiq {

class Tokenizer;
class LoadedModel;
class CudaModel;

struct ServeConfig {
  std::string model_dir;            // --model: config.json, *.safetensors[, tokenizer.json]
  std::string device = "cpu";       // --device: cpu or cuda
  size_t max_total_tokens = 0;      // --max-total-tokens: L1 slots; 0: 8,192 on cpu, 65,536 on cuda
  int page_size = 1;                // --page-size
  bool hicache = true;              // false: --no-hicache (L1 only)
  HostKvPoolOptions host;           // --hicache-codec, --record-align, --hicache-size / --hicache-ratio
  RadixCacheOptions cache;          // --hicache-write-policy
  SchedulerOptions scheduler;       // --max-prefill-tokens, --max-running-requests
  int transfer_workers = 2;         // CPU transfer engine threads
  std::string served_model_name;    // --served-model-name; empty: the directory's name
};

class ServingStack {
 public:
  // Errors name what failed: the model directory (its files and fields), the
  // tokenizer, the device (kUnavailable without a GPU), or the pools.
  static Result<std::unique_ptr<ServingStack>> create(const ServeConfig& config);
  ~ServingStack();

  ServingEngine& engine() { return *serving_; }
  // Null when the model directory has no tokenizer.json (token-id mode).
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  const std::string& model_name() const { return model_name_; }
  int vocab_size() const { return vocab_size_; }
  // Tokens that end generation unless a request sets ignore_eos
  // (generation_config.json's or config.json's eos_token_id).
  const std::vector<int32_t>& eos_token_ids() const { return eos_; }
  // The longest prompt + output a request can have: L1's slots.
  size_t context_tokens() const { return l1_->num_slots(); }
  // L2 capacity in tokens (0 without a host tier); its use is in engine().stats().
  size_t host_capacity_tokens() const { return l2_ ? l2_->capacity_tokens() : 0; }
  const std::string& device() const { return device_; }

 private:
  ServingStack() = default;

  std::string model_name_, device_;
  int vocab_size_ = 0;
  std::vector<int32_t> eos_;
  std::unique_ptr<Tokenizer> tokenizer_;
  // Declared in dependency order, destroyed in reverse.
  std::unique_ptr<LoadedModel> model_;
  std::unique_ptr<CudaModel> cuda_model_;
  std::unique_ptr<DeviceKvPool> l1_;
  std::unique_ptr<HostKvPool> l2_;
  std::unique_ptr<TransferEngine> transfer_;
  std::unique_ptr<RadixCache> cache_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<ServingEngine> serving_;
};

}  // namespace hiq
