// model/cuda/attention.h (internal to the CUDA model) — causal grouped-query
// attention over the paged L1 pool, for prefill (with a cached prefix) and
// decode in one kernel.
//
// Every sequence of a batch brings q_len new query tokens and reads the K and
// V of its whole context, kv_len tokens (the cached prefix, then the new
// tokens, whose KV the forward pass has just written), row by row from L1
// through its slot table. Query token i of a sequence sits at position
// kv_len − q_len + i and sees context tokens 0 … that position.
//
// Work split: a block owns one KV head of one sequence and 64 "rows", a row
// being one (query token, query head) pair of that KV head's group — so the K
// and V tiles it stages in shared memory serve every query head of the group.
// Long contexts with few rows (decode) are also split along the context
// (flash-decoding): each split writes a partial result (running max, sum and
// unnormalised output), and those are combined either by a second kernel or,
// in the decode form given split counters, by whichever split block of a
// (sequence, KV head) finishes last. When a block's rows
// fit one warp (q_len × group ≤ 16: decode), its four warps instead split
// each K/V tile's tokens among them and merge their softmax states at the end.
//
// Two kernels compute this: a portable one (attention.cu: mma.sync, any head
// dim, context splits) and, on Hopper, one on the warpgroup instructions
// (attention_sm90.cu: head_dim 128, no splits) for batches whose rows fill
// the GPU — prefill. attention_kernel_for() chooses. The Hopper kernel comes
// in two forms: one gathers K and V from L1 by slot itself; the staged one
// first gathers each sequence's context into a contiguous staging buffer
// (one copy of the context per layer), which the bulk tensor copy engine
// then streams into shared memory without the compute threads' help.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"

namespace hiq::cuda {

// One sequence of the batch (int4-aligned: the kernel reads it in one load).
struct alignas(16) AttentionSequence {
  int32_t q_start;     // its first query token in the batch's [token] arrays
  int32_t q_len;       // new tokens
  int32_t kv_len;      // context tokens, the new ones included (≥ q_len)
  int32_t slot_start;  // its first entry in the slot table
};

enum class AttentionKernel {
  kPortable,    // attention.cu: every GPU, every supported head dim, context splits
  kSm90,        // attention_sm90.cu: compute capability 9.0, head_dim 128, one split
  kSm90Staged,  // the same, the context first gathered into AttentionArgs::staging (not in graphs: see below)
};

struct AttentionArgs {
  const __nv_bfloat16* q = nullptr;  // [token][q_token_stride]; head h at h · head_dim
  int64_t q_token_stride = 0;
  __nv_bfloat16* out = nullptr;      // [token][heads][head_dim]
  const __nv_bfloat16* k_plane = nullptr;  // L1 planes of the layer: row s = slot s,
  const __nv_bfloat16* v_plane = nullptr;  // [kv_heads][head_dim] each
  const uint32_t* slots = nullptr;         // slot table: sequence b's context at slot_start …
  const AttentionSequence* sequences = nullptr;
  int num_sequences = 0;
  int max_q_len = 0;   // the longest q_len (sizes the grid)
  int max_kv_len = 0;  // the longest kv_len (sizes the splits)
  int num_tokens = 0;  // Σ q_len
  int heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 0;     // softmax scale, 1/sqrt(head_dim)
  float* workspace = nullptr;   // attention_workspace_floats(...) floats, for split contexts
  int splits = 1;               // from attention_splits()
  // Who merges the decode form's split contexts. Given counters, the split
  // blocks of each (sequence, KV head) count themselves on them and the last
  // one merges the splits (one launch, not two); nullptr: a second kernel,
  // one block per (token, head) row. Both run the same device code in the
  // same order: the same bits. num_sequences × kv_heads counters,
  // [sequence][kv_head], zero before the first launch; every launch leaves
  // them zero again, so a graph replay or the next layer needs no reset.
  // Launches that share them must be ordered (one stream), as their
  // workspace must.
  unsigned int* split_counters = nullptr;
  AttentionKernel kernel = AttentionKernel::kPortable;  // from attention_kernel_for()
  // kSm90Staged only: Σ kv_len over the sequences, and attention_staging_bytes() of device memory.
  int context_entries = 0;
  void* staging = nullptr;
};

// The head dims the kernel is built for.
bool attention_head_dim_supported(int head_dim);

// The kernel for a batch on the current device with `multiprocessors` SMs:
// kSm90 when the device is compute capability 9.0, head_dim is 128 and the
// batch has enough rows to give every SM a block without splitting the
// context (a prefill); kPortable otherwise.
AttentionKernel attention_kernel_for(const AttentionArgs& args, int multiprocessors);

// Whether the portable kernel runs these args in its decode form (every
// sequence's rows for one KV head, q_len × group, fit one warp's 16).
bool attention_decode_form(const AttentionArgs& args);

// How many context splits to use for a batch on `multiprocessors` SMs: more
// when the batch alone cannot fill the GPU; always 1 for the kSm90 kernel.
// In the decode form, the count whose blocks fill the resident slots in the
// fewest rounds of the fewest tiles (each sequence's context is split in
// that many parts of whole tiles).
int attention_splits(const AttentionArgs& args, int multiprocessors);
// Whether a launch with these args merges its splits in the attention kernel
// itself (the decode form, splits > 1, split counters given) rather than
// in the separate combine kernel.
bool attention_combines_in_kernel(const AttentionArgs& args);
// Floats of workspace a call with `splits` needs (0 when splits == 1).
size_t attention_workspace_floats(int splits, int num_tokens, int heads, int head_dim);

// Bytes of staging a kSm90Staged call needs (0 for the other kernels): K and
// V of every sequence's context, each followed by one tile of zeros. Its
// launch encodes tensor maps of this buffer's address and extent, which a
// captured CUDA graph would freeze: decode graphs use kSm90 or kPortable.
size_t attention_staging_bytes(const AttentionArgs& args);

// Launches the attention (and, for splits > 1 unless it combines in kernel,
// the combine kernel) on `stream`, with args.kernel (an error if that kernel
// cannot run these args here).
Status launch_attention(const AttentionArgs& args, cudaStream_t stream);

// The kSm90 and kSm90Staged kernels alone (attention_sm90.cu).
bool attention_sm90_supports(const AttentionArgs& args);
Status launch_attention_sm90(const AttentionArgs& args, cudaStream_t stream);

}  // namespace hiq::cuda
