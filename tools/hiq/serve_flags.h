// tools/hiq/serve_flags.h — the flags that build a ServingStack (model,
// device, L1, L2 and cache policy, scheduler), shared by `hiq serve` and the
// in-process mode of `hiq bench serve`.
#pragma once

#include <CLI/CLI.hpp>

#include "codec/codec.h"
#include "core/units.h"
#include "server/http_server.h"
#include "tools/hiq/cuda_graph_flags.h"
#include "tools/hiq/flag_errors.h"
#include "tools/hiq/host_tier_flags.h"
#include "tools/hiq/scheduler_flags.h"
#include "tools/hiq/storage_flags.h"
#include "tools/hiq/tp_flags.h"

namespace hiq::cli {

struct ServeFlags {
  ServeConfig config;
  HttpOptions http;
  int64_t max_total_tokens = 0;
  HostTierFlags host;
  SchedulerFlags scheduler;
  StorageFlags storage;
  TpFlags tp;
  int64_t max_queued_requests = 0;
  std::string demotion_device = "auto";  // --hicache-demotion-device
};

inline Result<ServeConfig> build_stack_config(const ServeFlags& f) {
  ServeConfig c = f.config;
  if (f.max_total_tokens < 0) return invalid_argument("--max-total-tokens must not be negative");
  c.max_total_tokens = static_cast<size_t>(f.max_total_tokens);
  c.hicache = !f.host.none;
  HIQ_ASSIGN_OR_RETURN(c.host, host_tier_options(f.host));
  HIQ_RETURN_IF_ERROR(apply_host_cache_flags(f.host, c.cache));
  const Result<DemotionDevice> demotion = parse_demotion_device(f.demotion_device);
  if (!demotion) return with_flag_names(demotion.status(), {{"demotion_device", "--hicache-demotion-device"}});
  c.demotion_device = *demotion;
  HIQ_RETURN_IF_ERROR(apply_scheduler_flags(f.scheduler, c.scheduler));
  if (f.max_queued_requests < 0) return invalid_argument("--max-queued-requests must not be negative");
  c.scheduler.max_queued_requests = static_cast<size_t>(f.max_queued_requests);
  HIQ_RETURN_IF_ERROR(apply_storage_flags(f.storage, c));
  HIQ_RETURN_IF_ERROR(apply_tp_flags(f.tp, c.tp_devices, c.tp_collective));
  HIQ_RETURN_IF_ERROR(with_flag_names(c.validate(), {{"model_dir", "--model"},
                                                     {"device", "--device"},
                                                     {"page_size", "--page-size"},
                                                     {"max_total_tokens", "--max-total-tokens"},
                                                     {"context_length", "--context-length"},
                                                     {"max_prefill_tokens", "--max-prefill-tokens"},
                                                     {"max_running_requests", "--max-running-requests"},
                                                     {"cpu_threads", "--cpu-threads"},
                                                     {"tp_size", "--tp-size"},
                                                     {"tp_devices", "--tp-devices"},
                                                     {"cuda_graph_max_batch", "--cuda-graph-max-bs"},
                                                     {"storage_block_tokens", "--hicache-storage-block-tokens"},
                                                     {"storage", "--hicache-storage-backend"},
                                                     {"demotion_device", "--hicache-demotion-device"}}));
  return c;
}

// Registers the flags of ServeFlags::config and the cache (not --host/--port/--api-key).
inline void add_stack_flags(CLI::App* app, ServeFlags& flags) {
  ServeFlags* f = &flags;
  app->add_option("--device", f->config.device, "cpu or cuda")->capture_default_str();
  app->add_option("--served-model-name", f->config.served_model_name, "Model name in the API (default: the directory)");
  app->add_option("--chat-template", f->config.chat_template_file,
                  "Jinja chat template file (or a JSON with \"chat_template\") instead of the model's own");
  app->add_option("--max-total-tokens", f->max_total_tokens, "L1 capacity in tokens (0: 8192 cpu, 65536 cuda)")
      ->capture_default_str();
  app->add_option("--context-length", f->config.context_length,
                  "Longest prompt + output (0: the model's max_position_embeddings, YaRN-scaled); above the model's "
                  "it is used with a warning")
      ->capture_default_str();
  app->add_option("--page-size", f->config.page_size, "Tokens per page")->capture_default_str();
  app->add_option("--cpu-threads", f->config.cpu_threads, "--device cpu: threads of the forward pass (0: every core)")
      ->capture_default_str();
  app->add_option("--tp-size", f->config.tp_size,
                  "Tensor-parallel ranks: the model's heads and MLP split over this many threads (--device cpu) or "
                  "GPUs (--device cuda), each with its own KV pools")
      ->capture_default_str();
  add_tp_flags(app, f->tp);
  add_cuda_graph_flags(app, f->config.cuda);
  add_host_tier_flags(app, f->host);
  app->add_option("--hicache-demotion-device", f->demotion_device,
                  "A ladder (tiered:…): where demotion re-encodes records: gpu, cpu, or auto (the GPU with --device "
                  "cuda)")
      ->capture_default_str();
  add_scheduler_flags(app, f->scheduler);
  add_storage_flags(app, f->storage);
  app->add_option("--max-queued-requests", f->max_queued_requests,
                  "Requests that may wait for admission; more get a 503 with Retry-After (0: no bound)")
      ->capture_default_str();
}

}  // namespace hiq::cli
