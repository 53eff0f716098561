// tools/hiq/storage_flags.h — the third tier's flags (SGLang's names, plus
// ours for the block size and the model's identity), shared by `hiq serve`
// and the in-process `hiq bench serve`.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "server/serving_stack.h"
#include "storage/storage_options.h"

namespace hiq::cli {

struct StorageFlags {
  std::string backend = "none";            // --hicache-storage-backend
  std::string extra_config;                // --hicache-storage-backend-extra-config
  std::string prefetch_policy = "best_effort";  // --hicache-storage-prefetch-policy
  std::string size;                        // --hicache-storage-size; empty: the extra config's "size"
  int block_tokens = 0;                    // --hicache-storage-block-tokens; 0: by backend
  std::string model_fingerprint;           // --model-fingerprint
};

inline void add_storage_flags(CLI::App* app, StorageFlags& flags) {
  StorageFlags* f = &flags;
  app->add_option("--hicache-storage-backend", f->backend,
                  "Third tier (L3), shared across restarts and servers: none, file or redis")
      ->capture_default_str();
  app->add_option("--hicache-storage-backend-extra-config", f->extra_config,
                  "JSON: file {\"path\", \"size\"}; redis {\"host\", \"port\", \"prefix\"}; docs/storage.md lists all");
  app->add_option("--hicache-storage-size", f->size,
                  "Capacity of a file (or memory) storage tier, LRU-evicted: 64GB, 0.5TiB; a plain number is GB "
                  "(or \"size\" in the extra config; Redis bounds itself with maxmemory)");
  app->add_option("--hicache-storage-prefetch-policy", f->prefetch_policy,
                  "How long a queued request waits for its L3 prefetch: best_effort, wait_complete or timeout")
      ->capture_default_str();
  app->add_option("--hicache-storage-block-tokens", f->block_tokens,
                  "Tokens per stored block, whole pages (0: by backend: file 64; redis the largest power of two whose "
                  "value is at most 1.25 MiB)")
      ->capture_default_str();
  app->add_option("--model-fingerprint", f->model_fingerprint,
                  "The model's identity in L3 keys (default: a hash of config.json and the weights)");
}

// Fills config.storage from the flags.
inline Status apply_storage_flags(const StorageFlags& f, ServeConfig& config) {
  auto options = parse_storage_options(f.backend, f.extra_config, f.prefetch_policy, f.size);
  if (!options) return options.status().with_context("--hicache-storage-*");
  config.storage = *options;
  config.storage_block_tokens = f.block_tokens;
  config.model_fingerprint = f.model_fingerprint;
  return Status::ok();
}

}  // namespace hiq::cli
