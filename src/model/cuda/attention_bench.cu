// `hiq bench attention` (model/attention_bench.h): each attention kernel on
// the same random Q, K and V, timed with CUDA events around the launch alone.
#include <algorithm>
#include <cmath>
#include <random>

#include "cuda/buffers.h"
#include "cuda/check.cuh"
#include "cuda/device.h"
#include "model/attention_bench.h"
#include "model/cuda/attention.h"
#include "model/cuda/bench_util.h"

namespace hiq {

using cuda::AttentionArgs;
using cuda::AttentionKernel;

Result<AttentionBenchReport> run_attention_bench(const AttentionBenchOptions& o,
                                                 const std::function<void(size_t, size_t)>& progress) {
  if (o.heads <= 0 || o.kv_heads <= 0 || o.heads % o.kv_heads != 0)
    return invalid_argument("bench attention: heads must be a positive multiple of kv_heads");
  if (!cuda::attention_head_dim_supported(o.head_dim))
    return invalid_argument("bench attention: head_dim " + std::to_string(o.head_dim) + " has no kernel");
  if (o.prefix < 0) return invalid_argument("bench attention: the prefix cannot be negative");
  HIQ_ASSIGN_OR_RETURN(const std::vector<cuda::GpuInfo> gpus, cuda::query_gpus());
  AttentionBenchReport report;
  report.gpu = gpus.front().name;
  int device = 0, multiprocessors = 0;
  HIQ_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  HIQ_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
  HIQ_ASSIGN_OR_RETURN(cuda::Stream stream, cuda::make_stream());

  size_t done = 0;
  for (int tokens : o.tokens) {
    const int context = o.prefix + tokens;
    const size_t q_row = static_cast<size_t>(o.heads) * o.head_dim, kv_row = static_cast<size_t>(o.kv_heads) * o.head_dim;
    HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory q,
                         cuda::random_device_bf16(static_cast<size_t>(tokens) * q_row, 1, 1.f, "q"));
    HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory k,
                         cuda::random_device_bf16(static_cast<size_t>(context) * kv_row, 2, 1.f, "k"));
    HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory v,
                         cuda::random_device_bf16(static_cast<size_t>(context) * kv_row, 3, 1.f, "v"));
    HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory out, cuda::device_alloc(static_cast<size_t>(tokens) * q_row * 2, "out"));
    // The context's slots, shuffled: L1 gives a sequence whichever slots are free.
    std::vector<uint32_t> slots(static_cast<size_t>(context));
    for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<uint32_t>(i);
    std::shuffle(slots.begin(), slots.end(), std::mt19937(4));
    const cuda::AttentionSequence sequence{0, tokens, context, 0};
    HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory tables,
                         cuda::device_alloc(sizeof(sequence) + slots.size() * sizeof(uint32_t), "slot table"));
    HIQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(tables.get(), &sequence, sizeof(sequence), cudaMemcpyHostToDevice));
    auto* slot_table = reinterpret_cast<uint32_t*>(static_cast<std::byte*>(tables.get()) + sizeof(sequence));
    HIQ_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(slot_table, slots.data(), slots.size() * sizeof(uint32_t), cudaMemcpyHostToDevice));

    AttentionArgs args;
    args.q = static_cast<const __nv_bfloat16*>(q.get());
    args.q_token_stride = static_cast<int64_t>(q_row);
    args.out = static_cast<__nv_bfloat16*>(out.get());
    args.k_plane = static_cast<const __nv_bfloat16*>(k.get());
    args.v_plane = static_cast<const __nv_bfloat16*>(v.get());
    args.slots = slot_table;
    args.sequences = static_cast<const cuda::AttentionSequence*>(tables.get());
    args.num_sequences = 1;
    args.max_q_len = tokens;
    args.max_kv_len = context;
    args.num_tokens = tokens;
    args.heads = o.heads;
    args.kv_heads = o.kv_heads;
    args.head_dim = o.head_dim;
    args.scale = 1.f / std::sqrt(static_cast<float>(o.head_dim));

    AttentionBenchReport::Row row;
    row.tokens = tokens;
    row.prefix = o.prefix;
    const double pairs = static_cast<double>(tokens) * o.prefix + static_cast<double>(tokens) * (tokens + 1) / 2;
    row.flops = 4.0 * o.head_dim * o.heads * pairs;

    // One split counter per KV head (one sequence), zeroed once: every launch leaves them zero.
    const size_t counter_bytes = static_cast<size_t>(o.kv_heads) * sizeof(unsigned int);
    HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory counters, cuda::device_alloc(counter_bytes, "split counters"));
    HIQ_CUDA_RETURN_IF_ERROR(cudaMemset(counters.get(), 0, counter_bytes));

    std::vector<float> portable_out;
    args.context_entries = context;
    for (AttentionKernel kernel : {AttentionKernel::kPortable, AttentionKernel::kSm90, AttentionKernel::kSm90Staged}) {
      args.kernel = kernel;
      args.splits = cuda::attention_splits(args, multiprocessors);
      // The Hopper forms run where the chooser would pick the Hopper kernel: this GPU, this shape.
      if (kernel != AttentionKernel::kPortable &&
          cuda::attention_kernel_for(args, multiprocessors) != AttentionKernel::kSm90)
        continue;
      HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory workspace,
                           cuda::device_alloc(std::max<size_t>(1, cuda::attention_workspace_floats(
                                                                       args.splits, tokens, o.heads, o.head_dim)) *
                                                  sizeof(float),
                                              "attention workspace"));
      args.workspace = static_cast<float*>(workspace.get());
      // The staged kernel's time includes its gather into this buffer.
      HIQ_ASSIGN_OR_RETURN(cuda::DeviceMemory staging,
                           cuda::device_alloc(std::max<size_t>(1, cuda::attention_staging_bytes(args)), "staging"));
      args.staging = staging.get();
      // The portable kernel's split decode contexts merge in a kernel of
      // their own ("portable") and, timed too, in the attention kernel
      // itself, on the counters ("portable-combine-in-kernel").
      for (const bool in_kernel : {false, true}) {
        args.split_counters = in_kernel ? static_cast<unsigned int*>(counters.get()) : nullptr;
        if (in_kernel && !cuda::attention_combines_in_kernel(args)) continue;
        // NaN everywhere first: an element the kernel skipped shows as an error.
        HIQ_CUDA_RETURN_IF_ERROR(cudaMemset(out.get(), 0xff, static_cast<size_t>(tokens) * q_row * 2));
        AttentionBenchReport::Kernel k_row;
        k_row.name = kernel == AttentionKernel::kSm90                 ? "sm90"
                     : kernel == AttentionKernel::kSm90Staged         ? "sm90-staged"
                     : in_kernel                                    ? "portable-combine-in-kernel"
                                                                      : "portable";
        HIQ_ASSIGN_OR_RETURN(k_row.seconds, cuda::median_event_seconds(
                                                [&](int) { return cuda::launch_attention(args, stream.get()); }, 1,
                                                o.seconds_per_measurement, stream.get()));
        HIQ_ASSIGN_OR_RETURN(std::vector<float> result,
                             cuda::download_floats(out.get(), static_cast<size_t>(tokens) * q_row, false));
        if (portable_out.empty()) portable_out = std::move(result);
        else k_row.relative_error = cuda::relative_error(result, portable_out);
        row.kernels.push_back(k_row);
      }
    }
    report.rows.push_back(std::move(row));
    if (progress) progress(++done, o.tokens.size());
  }
  return report;
}

}  // namespace hiq
