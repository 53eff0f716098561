// Paged causal GQA attention on the tensor cores (mma.sync m16n8k16, BF16 in,
// FP32 accumulate), in the manner of FlashAttention-2: each warp keeps 16 rows
// of Q in registers, the block streams 64-token K and V tiles of the context
// through shared memory (gathered from L1 by slot, two stages deep with
// cp.async), and the softmax runs online, so no score matrix is ever stored.
#include <algorithm>
#include <array>
#include <atomic>
#include <cfloat>
#include <climits>

#include "cuda/check.cuh"
#include "cuda/kernel_attributes.cuh"
#include "model/cuda/attention.h"
#include "model/cuda/attention_device.cuh"
#include "model/cuda/dependent_launch.cuh"

namespace hiq::cuda {
namespace {

using namespace attention_device;

constexpr int kRowsPerWarp = 16;
constexpr int kTile = 64;  // context tokens per K/V tile
// Blocks of 4 warps (64 rows) for short prompts and decode; 8 warps (128
// rows) for long prompts, where each staged K/V tile then serves twice the
// rows: half the L2→SM traffic at the same warps per multiprocessor.
constexpr int kSmallWarps = 4, kLargeWarps = 8;
constexpr int kLargeBlockMinRows = 1024;  // rows of the longest sequence that pick 8 warps
// Shared-memory rows are padded by 16 bytes, so the 8 rows an ldmatrix reads
// fall in 8 different 16-byte bank groups.
template <int D>
constexpr int kSmemStride = D + 8;  // elements
template <int D>
constexpr int kStageElements = 2 * kTile * kSmemStride<D>;  // K tile, then V tile
template <int D>
constexpr size_t kSmemBytes = 2 * kStageElements<D> * sizeof(__nv_bfloat16);  // two stages

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
}

// d += a · b for one 16×8×16 tile.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Stages context tokens [kv0, kv0 + kTile) of KV head `kv_head` into `stage`;
// tokens at or past `kv_end` become zeros. A thread copies the same rows of K
// and of V, so it reads each of its rows' slots once, and reads them all
// before its first copy: the copies then wait on one round trip to the slot
// table, not on one each.
template <int D, int kThreads>
__device__ __forceinline__ void load_tile(__nv_bfloat16* stage, const AttentionArgs& a, const uint32_t* slots,
                                          int kv0, int kv_end, int kv_head) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  constexpr int kPartCopies = kTile * kChunks;  // of K, and again of V
  static_assert(kPartCopies % kThreads == 0 || kPartCopies < kThreads, "threads share a part's chunks evenly");
  constexpr int kCopies = (kPartCopies + kThreads - 1) / kThreads;  // per thread and part
  // With fewer chunks than threads (head_dim 16 in the largest block) the last threads copy none.
  if (kPartCopies < kThreads && static_cast<int>(threadIdx.x) >= kPartCopies) return;
  const int64_t row_stride = static_cast<int64_t>(a.kv_heads) * D;
  int64_t offset[kCopies];  // of each copy's row in the planes; 0 past the context
#pragma unroll
  for (int j = 0; j < kCopies; ++j) {
    const int i = threadIdx.x + j * kThreads;
    const int token = kv0 + i / kChunks;
    offset[j] = token < kv_end ? static_cast<int64_t>(__ldg(slots + token)) * row_stride : 0;
  }
#pragma unroll
  for (int part = 0; part < 2; ++part) {  // 0: K, 1: V
    const __nv_bfloat16* plane = (part == 0 ? a.k_plane : a.v_plane) + kv_head * D;
#pragma unroll
    for (int j = 0; j < kCopies; ++j) {
      const int i = threadIdx.x + j * kThreads;
      const int r = i / kChunks, c = i % kChunks;
      copy16_async(smem_address(stage + part * kTile * kSmemStride<D> + r * kSmemStride<D> + c * 8),
                   plane + offset[j] + c * 8, kv0 + r < kv_end);
    }
  }
}

// The two rows a thread holds of its warp's 16 (lane/4 and lane/4 + 8), for
// one KV head of one sequence: the warp's first row is `warp_row0` of that
// sequence's q_len × group rows.
struct ThreadRows {
  int token[2], head[2], position[2];  // position −1: no such row
  bool valid[2];
};

__device__ __forceinline__ ThreadRows thread_rows(int warp_row0, int rows, int group, int kv_head,
                                                  int first_position, int lane) {
  ThreadRows r;
  for (int h = 0; h < 2; ++h) {
    const int row = warp_row0 + lane / 4 + 8 * h;
    r.valid[h] = row < rows;
    r.token[h] = row / group;
    r.head[h] = kv_head * group + row % group;
    r.position[h] = r.valid[h] ? first_position + r.token[h] : -1;
  }
  return r;
}

// The context tokens [begin, end) a block reads: its split of its own
// sequence's context, cut at its last row's position. Splitting each
// sequence's context, rather than the longest one's, gives every split work
// when contexts differ, and when a decode graph sized the splits for its
// bucket's context (up to twice the real one).
struct ContextRange {
  int begin, end;
};

__device__ __forceinline__ ContextRange context_range(const AttentionArgs& a, const AttentionSequence& seq, int split,
                                                      int last_position) {
  const int split_len = (seq.kv_len + a.splits - 1) / a.splits;
  const int split_tokens = (split_len + kTile - 1) / kTile * kTile;
  const int begin = split * split_tokens;
  return {begin, min(min(begin + split_tokens, seq.kv_len), last_position + 1)};
}

// The thread's Q fragments (A operand, row-major 16 × D), loaded once; zeros for rows past the end.
template <int D>
__device__ __forceinline__ void load_q(uint32_t (&q_frag)[D / 16][4], const AttentionArgs& a,
                                       const AttentionSequence& seq, const ThreadRows& r, int lane) {
  for (int kk = 0; kk < D / 16; ++kk)
    for (int half = 0; half < 2; ++half)  // columns kk·16 + … and kk·16 + 8 + …
      for (int h = 0; h < 2; ++h) {       // rows lane/4 and lane/4 + 8
        uint32_t v = 0;
        if (r.valid[h]) {
          const __nv_bfloat16* q = a.q + static_cast<int64_t>(seq.q_start + r.token[h]) * a.q_token_stride +
                                   r.head[h] * D + kk * 16 + half * 8 + (lane % 4) * 2;
          v = *reinterpret_cast<const uint32_t*>(q);
        }
        q_frag[kk][half * 2 + h] = v;
      }
}

// A thread's running softmax and unnormalised output for its two rows.
template <int D>
struct OnlineSoftmax {
  float acc[D / 8][4] = {};
  float row_max[2] = {-INFINITY, -INFINITY};  // in units of log2, scale applied
  float row_sum[2] = {0.f, 0.f};              // this thread's partial sums

  // Takes N 8-token blocks of scores S = Q Kᵀ (tokens from `token0`) into
  // the state: masks them (unless `unmasked`), moves the max, and leaves
  // P = exp2(S − max) in `s`, the output rescaled to the new max.
  template <int N>
  __device__ __forceinline__ void update(float (&s)[N][4], int token0, int kv_end, const int (&row_position)[2],
                                         bool unmasked, float scale_log2, int lane) {
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < N; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e / 2;
        const int token = token0 + n * 8 + (lane % 4) * 2 + e % 2;
        const bool visible = unmasked || (token < kv_end && token <= row_position[h]);
        s[n][e] = visible ? s[n][e] * scale_log2 : -INFINITY;
        tile_max[h] = fmaxf(tile_max[h], s[n][e]);
      }
    float correction[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
      const float new_max = fmaxf(row_max[h], tile_max[h]);
      // A row that has seen nothing yet keeps max −inf: subtract 0 instead
      // of −inf, so every exponent below is exp2(−inf) = 0, never NaN.
      const float base = new_max == -INFINITY ? 0.f : new_max;
      correction[h] = fast_exp2(row_max[h] - base);
      row_max[h] = new_max;
      row_sum[h] *= correction[h];
#pragma unroll
      for (int n = 0; n < N; ++n)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          s[n][e] = fast_exp2(s[n][e] - base);
          row_sum[h] += s[n][e];
        }
    }
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[n][e] *= correction[e / 2];
  }

  // The row sums over the four threads that share each row.
  __device__ __forceinline__ void total_sums() {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
      row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
    }
  }
};

// S = Q Kᵀ for 16 rows and the N · 8 staged tokens from `k_rows`.
template <int N, int D>
__device__ __forceinline__ void scores(float (&s)[N][4], const uint32_t (&q_frag)[D / 16][4],
                                       const __nv_bfloat16* k_rows, int lane) {
  for (int n = 0; n < N; ++n)
    for (int e = 0; e < 4; ++e) s[n][e] = 0.f;
  const int m = lane / 8;  // which 8×8 matrix this lane addresses
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int n = 0; n < N; n += 2) {
      uint32_t b[4];
      ldmatrix_x4(b, k_rows + ((n + m / 2) * 8 + lane % 8) * kSmemStride<D> + kk * 16 + (m % 2) * 8);
      mma_bf16(s[n], q_frag[kk], b[0], b[1]);
      mma_bf16(s[n + 1], q_frag[kk], b[2], b[3]);
    }
}

// O += P V over the same N · 8 tokens, V staged from `v_rows`. The score
// accumulators of two neighbouring 8-token blocks are exactly an A fragment
// over 16 tokens.
template <int N, int D>
__device__ __forceinline__ void accumulate_values(float (&acc)[D / 8][4], const float (&p)[N][4],
                                                  const __nv_bfloat16* v_rows, int lane) {
  const int m = lane / 8;
#pragma unroll
  for (int kk = 0; kk < N / 2; ++kk) {
    const uint32_t a[4] = {pack_bf16(p[2 * kk][0], p[2 * kk][1]), pack_bf16(p[2 * kk][2], p[2 * kk][3]),
                           pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                           pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int n = 0; n < D / 8; n += 2) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, v_rows + (kk * 16 + (m % 2) * 8 + lane % 8) * kSmemStride<D> + (n + m / 2) * 8);
      mma_bf16(acc[n], a, b[0], b[1]);
      mma_bf16(acc[n + 1], a, b[2], b[3]);
    }
  }
}

// Where a row's result goes: the output (one split: normalised, BF16) or
// the split's partial result in the workspace ([split][token·heads][D]
// unnormalised outputs, then [split][token·heads] (max, sum)).
__device__ __forceinline__ float* partial_output(const AttentionArgs& a, int split, int64_t out_row) {
  const int64_t rows_total = static_cast<int64_t>(a.num_tokens) * a.heads;
  return a.workspace + (split * rows_total + out_row) * a.head_dim;
}
__device__ __forceinline__ void write_partial_stats(const AttentionArgs& a, int split, int64_t out_row, float max,
                                                    float sum) {
  const int64_t rows_total = static_cast<int64_t>(a.num_tokens) * a.heads;
  float* stats = a.workspace + a.splits * rows_total * a.head_dim + (split * rows_total + out_row) * 2;
  stats[0] = max;
  stats[1] = sum;
}

// Merging the splits of one output row (`out_row`, a (token, head) pair):
//   out = Σ_s w_s · acc_s,  w_s = 2^(max_s − M) / Σ_s 2^(max_s − M) · sum_s,  M = max_s max_s.
// The combine kernel and the in-kernel combine of the decode form both run
// these two functions, so their outputs are the same bits; the products and
// sums are written as explicit roundings so that no context can contract
// them differently. Loads bypass L1 (ld.global.cg): in the in-kernel
// combine, blocks on other multiprocessors wrote these partials.
constexpr int kMostSplits = 64;  // attention_splits() never gives more

// One whole warp reads every split's (max, sum) of the row, one split a
// lane (two for more than 32 splits), and leaves w_s in weight[s] for every
// s < kMostSplits (0 past a.splits).
__device__ __forceinline__ void combine_weights(const AttentionArgs& a, int64_t out_row, int lane, float* weight) {
  const int64_t rows_total = static_cast<int64_t>(a.num_tokens) * a.heads;
  const float* stats = a.workspace + a.splits * rows_total * a.head_dim;
  float max[2], sum[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int split = lane + 32 * h;
    const bool used = split < a.splits;
    max[h] = used ? __ldcg(stats + (split * rows_total + out_row) * 2) : -INFINITY;
    sum[h] = used ? __ldcg(stats + (split * rows_total + out_row) * 2 + 1) : 0.f;
  }
  float most = fmaxf(max[0], max[1]);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) most = fmaxf(most, __shfl_xor_sync(0xffffffffu, most, offset));
  const float base = most == -INFINITY ? 0.f : most;
  const float scale[2] = {exp2f(max[0] - base), exp2f(max[1] - base)};
  float total = __fmaf_rn(scale[0], sum[0], __fmul_rn(scale[1], sum[1]));
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) total += __shfl_xor_sync(0xffffffffu, total, offset);
  const float inv = total > 0.f ? __frcp_rn(total) : 0.f;
  weight[lane] = __fmul_rn(scale[0], inv);
  weight[lane + 32] = __fmul_rn(scale[1], inv);
}

// Element d of the row's output, from combine_weights()' weights: the splits
// summed in order, eight loads in flight.
__device__ __forceinline__ float combine_element(const AttentionArgs& a, const float* weight, int64_t out_row,
                                                 int d) {
  const int64_t split_stride = static_cast<int64_t>(a.num_tokens) * a.heads * a.head_dim;
  const float* partial = a.workspace + out_row * a.head_dim + d;
  float v = 0.f;
#pragma unroll 8
  for (int s = 0; s < a.splits; ++s) v = __fmaf_rn(weight[s], __ldcg(partial + s * split_stride), v);
  return v;
}

template <int D, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) attention_kernel(AttentionArgs a) {
  constexpr int kRows = kRowsPerWarp * kWarps;  // rows per block
  constexpr int kThreads = kWarps * 32;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* smem = reinterpret_cast<__nv_bfloat16*>(smem_raw);

  const int group = a.heads / a.kv_heads;
  const int seq_index = blockIdx.y / a.kv_heads, kv_head = blockIdx.y % a.kv_heads;
  const AttentionSequence seq = a.sequences[seq_index];
  const int rows = seq.q_len * group;
  // The last rows see the longest context: start them first, so that the
  // short blocks fill the tail of the grid instead of the long ones.
  const int block_row0 = (gridDim.x - 1 - blockIdx.x) * kRows;
  if (block_row0 >= rows) return;
  const int split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int first_position = seq.kv_len - seq.q_len;
  const uint32_t* slots = a.slots + seq.slot_start;
  const int last_row = min(block_row0 + kRows, rows) - 1;
  const auto [kv_begin, kv_end] = context_range(a, seq, split, first_position + last_row / group);

  const int warp_row0 = block_row0 + warp * kRowsPerWarp;
  const ThreadRows r = thread_rows(warp_row0, rows, group, kv_head, first_position, lane);
  const bool warp_active = warp_row0 < rows;
  // The position of the warp's first row: a tile that ends at or before it,
  // and inside the context, needs no mask for any row of the warp.
  const int warp_first_position = first_position + warp_row0 / group;
  uint32_t q_frag[D / 16][4];
  load_q<D>(q_frag, a, seq, r, lane);
  OnlineSoftmax<D> state;
  const float scale_log2 = a.scale * kLog2e;

  const int tiles = kv_end > kv_begin ? (kv_end - kv_begin + kTile - 1) / kTile : 0;
  if (tiles > 0) {
    load_tile<D, kThreads>(smem, a, slots, kv_begin, kv_end, kv_head);
    async_commit();
  }
  for (int t = 0; t < tiles; ++t) {
    const int kv0 = kv_begin + t * kTile;
    if (t + 1 < tiles) {
      load_tile<D, kThreads>(smem + ((t + 1) % 2) * kStageElements<D>, a, slots, kv0 + kTile, kv_end, kv_head);
      async_commit();
      async_wait<1>();
    } else {
      async_wait<0>();
    }
    __syncthreads();
    const __nv_bfloat16* k_tile = smem + (t % 2) * kStageElements<D>;
    const __nv_bfloat16* v_tile = k_tile + kTile * kSmemStride<D>;
    if (warp_active) {
      // 16 rows × 64 context tokens; the mask only on tiles that reach the
      // diagonal or the context's end.
      float s[kTile / 8][4];
      scores<kTile / 8, D>(s, q_frag, k_tile, lane);
      const bool unmasked = kv0 + kTile <= kv_end && kv0 + kTile - 1 <= warp_first_position;
      state.update(s, kv0, kv_end, r.position, unmasked, scale_log2, lane);
      accumulate_values<kTile / 8, D>(state.acc, s, v_tile, lane);
    }
    __syncthreads();  // the stage is overwritten by the load two tiles on
  }
  if (!warp_active) return;

  state.total_sums();
  for (int h = 0; h < 2; ++h) {
    if (!r.valid[h]) continue;
    const int64_t out_row = static_cast<int64_t>(seq.q_start + r.token[h]) * a.heads + r.head[h];
    if (a.splits == 1) {
      const float inv = state.row_sum[h] > 0.f ? 1.f / state.row_sum[h] : 0.f;
      __nv_bfloat16* out = a.out + out_row * D;
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<__nv_bfloat162*>(out + n * 8 + (lane % 4) * 2) =
            __floats2bfloat162_rn(state.acc[n][2 * h] * inv, state.acc[n][2 * h + 1] * inv);
    } else {
      float* out = partial_output(a, split, out_row);
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<float2*>(out + n * 8 + (lane % 4) * 2) =
            make_float2(state.acc[n][2 * h], state.acc[n][2 * h + 1]);
      if (lane % 4 == 0) write_partial_stats(a, split, out_row, state.row_max[h], state.row_sum[h]);
    }
  }
}

// Decode: when a block's rows (q_len × group) fit one warp's 16, the kernel
// above would run one warp while three wait on it. This one gives each of
// its four warps a quarter of every staged tile (16 context tokens) with a
// softmax state of its own, and merges the four states at the end through
// shared memory, as the combine step merges splits.
constexpr int kDecodeWarps = 4;
constexpr int kDecodeRows = kRowsPerWarp;
template <int D>
constexpr size_t kDecodeMergeBytes = kDecodeWarps * kDecodeRows * (D + 2) * sizeof(float);
template <int D>
constexpr size_t kDecodeSmemBytes = std::max(kSmemBytes<D>, kDecodeMergeBytes<D>);

// The in-kernel combine: the block's flag (whether it arrived last) at
// float 0 of the shared memory, then its rows' split weights [row][split]
// from float kCombineWeights on.
constexpr int kCombineWeights = 32;  // floats: 128 bytes, clear of the flag
constexpr size_t kCombineSmemBytes = (kCombineWeights + kDecodeRows * kMostSplits) * sizeof(float);

// Whether the decode kernel merges its splits itself (AttentionArgs::split_counters).
__host__ __device__ __forceinline__ bool combines_in_kernel(const AttentionArgs& a) {
  return a.splits > 1 && a.split_counters != nullptr;
}

template <int D>
__global__ void __launch_bounds__(kDecodeWarps * 32) decode_attention_kernel(AttentionArgs a) {
  static_assert(kCombineSmemBytes <= kDecodeSmemBytes<D>, "the combine's weights fit the stages");
  constexpr int kThreads = kDecodeWarps * 32, kWarpTokens = kTile / kDecodeWarps;
  static_assert(kWarpTokens == 16, "a warp's share of a tile is one 16-token A fragment of P");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* smem = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  // A dependent launch (launch_decode): the kernel before wrote q and the new tokens' K and V.
  wait_for_prerequisites();

  const int group = a.heads / a.kv_heads;
  const int seq_index = blockIdx.y / a.kv_heads, kv_head = blockIdx.y % a.kv_heads;
  const AttentionSequence seq = a.sequences[seq_index];
  const int rows = seq.q_len * group;  // ≤ kDecodeRows (attention_decode_form)
  if (rows == 0) return;
  const int split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int first_position = seq.kv_len - seq.q_len;
  const uint32_t* slots = a.slots + seq.slot_start;
  const auto [kv_begin, kv_end] = context_range(a, seq, split, first_position + (rows - 1) / group);

  const ThreadRows r = thread_rows(0, rows, group, kv_head, first_position, lane);  // every warp: the same rows
  uint32_t q_frag[D / 16][4];
  load_q<D>(q_frag, a, seq, r, lane);
  OnlineSoftmax<D> state;
  const float scale_log2 = a.scale * kLog2e;

  const int tiles = kv_end > kv_begin ? (kv_end - kv_begin + kTile - 1) / kTile : 0;
  if (tiles > 0) {
    load_tile<D, kThreads>(smem, a, slots, kv_begin, kv_end, kv_head);
    async_commit();
  }
  for (int t = 0; t < tiles; ++t) {
    if (t + 1 < tiles) {
      load_tile<D, kThreads>(smem + ((t + 1) % 2) * kStageElements<D>, a, slots, kv_begin + (t + 1) * kTile, kv_end,
                             kv_head);
      async_commit();
      async_wait<1>();
    } else {
      async_wait<0>();
    }
    __syncthreads();
    // This warp's 16 tokens of the tile.
    const int token0 = kv_begin + t * kTile + warp * kWarpTokens;
    const __nv_bfloat16* k_rows = smem + (t % 2) * kStageElements<D> + warp * kWarpTokens * kSmemStride<D>;
    const __nv_bfloat16* v_rows = k_rows + kTile * kSmemStride<D>;
    float s[kWarpTokens / 8][4];
    scores<kWarpTokens / 8, D>(s, q_frag, k_rows, lane);
    state.update(s, token0, kv_end, r.position, /*unmasked=*/false, scale_log2, lane);
    accumulate_values<kWarpTokens / 8, D>(state.acc, s, v_rows, lane);
    __syncthreads();  // the stage is overwritten by the load two tiles on
  }
  // Programmatic dependent launch (dependent_launch.cuh): the kernel after
  // us (the output projection, or the combine kernel) may be scheduled once
  // every block of this grid has got here (griddepcontrol.launch_dependents
  // only allows its scheduling). It reads what we write only after its
  // wait_for_prerequisites(), griddepcontrol.wait, which returns when this
  // whole grid has completed and its writes are visible — the last block's
  // combine included. So the merge below may write after this.
  const bool combine_here = combines_in_kernel(a);
  allow_dependents();

  // Merge the warps: each leaves its max, sum and unnormalised output per
  // row in shared memory (the stages are free: the loop ended on a barrier).
  auto* merge_out = reinterpret_cast<float*>(smem_raw);             // [warp][row][D]
  float* merge_stats = merge_out + kDecodeWarps * kDecodeRows * D;  // [warp][row] (max, sum)
  state.total_sums();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = lane / 4 + 8 * h;
    float* out = merge_out + (warp * kDecodeRows + row) * D;
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<float2*>(out + n * 8 + (lane % 4) * 2) =
          make_float2(state.acc[n][2 * h], state.acc[n][2 * h + 1]);
    if (lane % 4 == 0) {
      merge_stats[(warp * kDecodeRows + row) * 2] = state.row_max[h];
      merge_stats[(warp * kDecodeRows + row) * 2 + 1] = state.row_sum[h];
    }
  }
  __syncthreads();
  // Row `row` of this block's rows (q_len × group) is (token row / group, head kv_head · group + row % group).
  const auto out_row_of = [&](int row) {
    return static_cast<int64_t>(seq.q_start + row / group) * a.heads + kv_head * group + row % group;
  };
  for (int i = threadIdx.x; i < rows * D; i += kThreads) {
    const int row = i / D, d = i % D;
    float most = -INFINITY;
    for (int w = 0; w < kDecodeWarps; ++w) most = fmaxf(most, merge_stats[(w * kDecodeRows + row) * 2]);
    const float base = most == -INFINITY ? 0.f : most;
    float value = 0.f, total = 0.f;
    for (int w = 0; w < kDecodeWarps; ++w) {
      const float weight = fast_exp2(merge_stats[(w * kDecodeRows + row) * 2] - base);
      value += weight * merge_out[(w * kDecodeRows + row) * D + d];
      total += weight * merge_stats[(w * kDecodeRows + row) * 2 + 1];
    }
    const int64_t out_row = out_row_of(row);
    if (a.splits == 1) {
      a.out[out_row * D + d] = __float2bfloat16_rn(total > 0.f ? value / total : 0.f);
    } else {
      partial_output(a, split, out_row)[d] = value;
      if (d == 0) write_partial_stats(a, split, out_row, most, total);
    }
  }
  if (!combine_here) return;

  // The last of the (sequence, KV head)'s split blocks to get here merges
  // the splits ("split-K with a semaphore"); the others are done. Why the
  // last one sees every split's partials, in the terms of the PTX memory
  // model: a split's threads wrote them with plain stores; the barrier
  // below orders those before thread 0's fence, and that fence (fence.sc at
  // GPU scope, cumulative) with the atomic add after it is a release. The
  // last block's add is the one that finds splits − 1, and its fence after
  // it is the matching acquire: each add reads the value of the one before
  // it, and PTX's observation order runs through such chains of atomic
  // read-modify-writes, so every other block's release reaches it. The
  // barrier after that carries the acquire to every thread of the block.
  // So each partial write happens before each read of it, and those loads
  // go through L2 (__ldcg), L1 not being coherent across multiprocessors.
  // No block ever waits on another: no schedule of the blocks can stall.
  auto* arrived_last = reinterpret_cast<unsigned int*>(smem_raw);
  float* weight = reinterpret_cast<float*>(smem_raw) + kCombineWeights;  // [row][kMostSplits]
  __syncthreads();  // every partial written (and the merge's shared memory read: the flag overwrites it)
  if (threadIdx.x == 0) {
    unsigned int* counter = a.split_counters + blockIdx.y;
    __threadfence();
    const bool last = atomicAdd(counter, 1u) == static_cast<unsigned int>(a.splits - 1);
    if (last) {
      // Every split has counted itself: none touches the counter again in
      // this launch, and the next launch (the next layer, a graph's next
      // replay) finds it zero, stream order making the store visible.
      *counter = 0;
      __threadfence();
    }
    *arrived_last = last ? 1u : 0u;
  }
  __syncthreads();
  if (*arrived_last == 0) return;
  // Exactly as combine_kernel: a warp's weights per row, then each element's sum over the splits.
  for (int row = warp; row < rows; row += kDecodeWarps)
    combine_weights(a, out_row_of(row), lane, weight + row * kMostSplits);
  __syncthreads();
  for (int i = threadIdx.x; i < rows * D; i += kThreads) {
    const int row = i / D, d = i % D;
    const int64_t out_row = out_row_of(row);
    a.out[out_row * D + d] = __float2bfloat16_rn(combine_element(a, weight + row * kMostSplits, out_row, d));
  }
}

// The splits' merge as a kernel of its own: one block of head_dim threads
// (rounded up to a warp) per (token, head) row; its first warp finds the
// weights, then each thread adds its element of the splits' outputs.
__global__ void combine_kernel(AttentionArgs a) {
  allow_dependents();        // the output projection may start on its weights
  wait_for_prerequisites();  // a dependent launch: the attention before wrote the splits
  __shared__ float weight[kMostSplits];
  const int64_t row = blockIdx.x;
  if (threadIdx.x < 32) combine_weights(a, row, static_cast<int>(threadIdx.x), weight);
  __syncthreads();
  for (int d = threadIdx.x; d < a.head_dim; d += blockDim.x)
    a.out[row * a.head_dim + d] = __float2bfloat16_rn(combine_element(a, weight, row, d));
}

int rows_per_block(const AttentionArgs& a) {
  const int warps = a.max_q_len * (a.heads / a.kv_heads) >= kLargeBlockMinRows ? kLargeWarps : kSmallWarps;
  return warps * kRowsPerWarp;
}

template <int D, int kWarps>
Status launch_warps(const AttentionArgs& a, cudaStream_t stream) {
  // More than 48 KB of dynamic shared memory must be asked for, on each device.
  constexpr auto kKernel = attention_kernel<D, kWarps>;
  HIQ_RETURN_IF_ERROR(allow_dynamic_shared_memory<kKernel>(static_cast<int>(kSmemBytes<D>)));
  constexpr int kRows = kWarps * kRowsPerWarp;
  const int row_tiles = (a.max_q_len * (a.heads / a.kv_heads) + kRows - 1) / kRows;
  const dim3 grid(static_cast<unsigned>(row_tiles), static_cast<unsigned>(a.num_sequences * a.kv_heads),
                  static_cast<unsigned>(a.splits));
  attention_kernel<D, kWarps><<<grid, kWarps * 32, kSmemBytes<D>, stream>>>(a);
  return cuda_status(cudaGetLastError(), "attention_kernel");
}

template <int D>
Status launch_decode(const AttentionArgs& a, cudaStream_t stream) {
  constexpr auto kKernel = decode_attention_kernel<D>;
  HIQ_RETURN_IF_ERROR(allow_dynamic_shared_memory<kKernel>(static_cast<int>(kDecodeSmemBytes<D>)));
  const dim3 grid(1, static_cast<unsigned>(a.num_sequences * a.kv_heads), static_cast<unsigned>(a.splits));
  return launch_dependent("decode_attention_kernel", kKernel, grid, dim3(kDecodeWarps * 32), kDecodeSmemBytes<D>,
                          stream, a);
}

template <int D>
Status launch(const AttentionArgs& a, cudaStream_t stream) {
  if (attention_decode_form(a)) {
    HIQ_RETURN_IF_ERROR(launch_decode<D>(a, stream));
  } else {
    const bool large = rows_per_block(a) == kLargeWarps * kRowsPerWarp;
    HIQ_RETURN_IF_ERROR(
        (large ? launch_warps<D, kLargeWarps>(a, stream) : launch_warps<D, kSmallWarps>(a, stream)));
  }
  if (a.splits > 1 && !attention_combines_in_kernel(a)) {
    const int threads = std::min(1024, (a.head_dim + 31) / 32 * 32);
    const dim3 grid(static_cast<unsigned>(a.num_tokens * a.heads));
    HIQ_RETURN_IF_ERROR(launch_dependent("combine_kernel", combine_kernel, grid, dim3(threads), 0, stream, a));
  }
  return Status::ok();
}

}  // namespace

namespace {

// A decode batch: every sequence's rows for one KV head (q_len × group) fit one warp's 16.
bool decode_sized(const AttentionArgs& a) {
  return a.kv_heads > 0 && static_cast<long>(a.max_q_len) * (a.heads / a.kv_heads) <= kDecodeRows;
}

}  // namespace

bool attention_decode_form(const AttentionArgs& a) {
  return a.kernel == AttentionKernel::kPortable && decode_sized(a);
}

bool attention_combines_in_kernel(const AttentionArgs& a) {
  return attention_decode_form(a) && combines_in_kernel(a);
}

bool attention_head_dim_supported(int head_dim) {
  return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256;
}

namespace {

// Compute capability 9.0 (the sm_90a code of attention_sm90.cu runs on it and
// nowhere else), asked once per device (a tensor-parallel process runs on several).
bool device_is_sm90(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
    return false;
  return major == 9 && minor == 0;
}

bool current_device_is_sm90() {
  constexpr int kDevices = 64;
  static std::array<std::atomic<int8_t>, kDevices> known{};  // 0: not asked yet, 1: no, 2: yes
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (device < 0 || device >= kDevices) return device_is_sm90(device);
  int8_t k = known[static_cast<size_t>(device)].load(std::memory_order_relaxed);
  if (k == 0) {
    k = device_is_sm90(device) ? 2 : 1;
    known[static_cast<size_t>(device)].store(k, std::memory_order_relaxed);
  }
  return k == 2;
}

}  // namespace

AttentionKernel attention_kernel_for(const AttentionArgs& a, int multiprocessors) {
  constexpr int kSm90Rows = 128;  // rows of one kSm90 block
  if (a.heads <= 0 || a.kv_heads <= 0 || a.heads % a.kv_heads != 0 || a.head_dim != 128)
    return AttentionKernel::kPortable;
  // A decode batch: the portable kernel's decode form splits the context to
  // fill the GPU and gives each warp a share of every tile; the Hopper
  // kernel's blocks of 128 rows would hold 4 to 16, one block per KV head.
  if (decode_sized(a)) return AttentionKernel::kPortable;
  const long row_tiles = (static_cast<long>(a.max_q_len) * (a.heads / a.kv_heads) + kSm90Rows - 1) / kSm90Rows;
  // Its blocks must fill the GPU on their own: it cannot split the context.
  if (row_tiles * a.num_sequences * a.kv_heads < multiprocessors) return AttentionKernel::kPortable;
  return current_device_is_sm90() ? AttentionKernel::kSm90 : AttentionKernel::kPortable;
}

namespace {

// Blocks of the decode form resident on one multiprocessor (its shared
// memory decides); 1 when the device cannot say.
template <int D>
int ask_decode_blocks_per_multiprocessor() {
  constexpr auto kKernel = decode_attention_kernel<D>;
  int blocks = 0;
  if (!allow_dynamic_shared_memory<kKernel>(static_cast<int>(kDecodeSmemBytes<D>)).is_ok() ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kKernel, kDecodeWarps * 32, kDecodeSmemBytes<D>) !=
          cudaSuccess)
    return 1;
  return std::max(blocks, 1);
}

template <int D>
int decode_blocks_per_multiprocessor() {
  static const int blocks = ask_decode_blocks_per_multiprocessor<D>();  // the GPUs of a process are of one kind
  return blocks;
}

int decode_blocks_per_multiprocessor(int head_dim) {
  switch (head_dim) {
    case 16: return decode_blocks_per_multiprocessor<16>();
    case 32: return decode_blocks_per_multiprocessor<32>();
    case 64: return decode_blocks_per_multiprocessor<64>();
    case 128: return decode_blocks_per_multiprocessor<128>();
    case 256: return decode_blocks_per_multiprocessor<256>();
    default: return 1;
  }
}

}  // namespace

int attention_splits(const AttentionArgs& a, int multiprocessors) {
  if (a.kernel != AttentionKernel::kPortable) return 1;
  const int rows = rows_per_block(a);
  const int row_tiles = (a.max_q_len * (a.heads / a.kv_heads) + rows - 1) / rows;
  const long blocks = static_cast<long>(row_tiles) * a.num_sequences * a.kv_heads;
  // Each split keeps ≥ 2 tiles of the longest context.
  const long most = std::clamp(a.max_kv_len / (2L * kTile), 1L, static_cast<long>(kMostSplits));
  if (!attention_decode_form(a)) {
    // Prefill: aim at four blocks per multiprocessor.
    const long wanted = (4L * multiprocessors + blocks - 1) / blocks;
    return static_cast<int>(std::clamp(wanted, 1L, most));
  }
  // Decode blocks all read about as much and are bound by memory: the step
  // lasts about (waves of blocks) × (tiles a block reads + one for its
  // fixed work), plus a tile's worth for the combine when split. Merged in
  // the kernel, the combine saves its launch but not its reads (about a
  // tile's bytes at head_dim 128 and 16 splits), now at the tail of the
  // last split block: the same charge for both.
  // Pick the cheapest; the fewest splits among equals.
  const long slots = static_cast<long>(std::max(multiprocessors, 1)) * decode_blocks_per_multiprocessor(a.head_dim);
  long best = 1, best_cost = LONG_MAX;
  for (long s = 1; s <= most; ++s) {
    const long tiles = ((a.max_kv_len + s - 1) / s + kTile - 1) / kTile;
    const long waves = (blocks * s + slots - 1) / slots;
    const long cost = waves * (tiles + 1) + (s > 1 ? 1 : 0);
    if (cost < best_cost) best = s, best_cost = cost;
  }
  return static_cast<int>(best);
}

size_t attention_workspace_floats(int splits, int num_tokens, int heads, int head_dim) {
  if (splits <= 1) return 0;
  return static_cast<size_t>(splits) * num_tokens * heads * (head_dim + 2);
}

Status launch_attention(const AttentionArgs& a, cudaStream_t stream) {
  if (a.num_sequences == 0 || a.num_tokens == 0) return Status::ok();
  if (a.heads <= 0 || a.kv_heads <= 0 || a.heads % a.kv_heads != 0)
    return invalid_argument("attention: heads must be a positive multiple of kv_heads");
  if (a.splits > 1 && a.workspace == nullptr) return invalid_argument("attention: split contexts need a workspace");
  if (a.splits < 1 || a.splits > kMostSplits)
    return invalid_argument("attention: splits must be from 1 to " + std::to_string(kMostSplits));
  if (a.kernel != AttentionKernel::kPortable) return launch_attention_sm90(a, stream);
  switch (a.head_dim) {
    case 16: return launch<16>(a, stream);
    case 32: return launch<32>(a, stream);
    case 64: return launch<64>(a, stream);
    case 128: return launch<128>(a, stream);
    case 256: return launch<256>(a, stream);
    default:
      return invalid_argument("attention: head_dim " + std::to_string(a.head_dim) +
                              " is not supported by the CUDA kernel (16, 32, 64, 128 or 256)");
  }
}

}  // namespace hiq::cuda
