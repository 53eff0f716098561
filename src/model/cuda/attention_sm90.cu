// Paged causal GQA attention for prefill on Hopper's warpgroup tensor-core
// instructions (wgmma, sm_90a), head_dim 128. The same function as the
// portable kernel in attention.cu, on the rows that fill a block.
//
// Design. A block of two warpgroups owns 128 rows of one KV head of one
// sequence (a row is a (query token, query head) pair, as in attention.cu), so
// every K/V tile it stages serves all the query heads of the group.
//   - Q (128 rows × 128) is staged once in shared memory; K and V stream
//     through it in tiles of 128 context tokens, three stages deep. The
//     kSm90 form gathers them from L1 by slot with cp.async, every thread
//     taking a share (the paged layout rules out the bulk tensor copy:
//     consecutive tokens are not consecutive rows). The kSm90Staged form
//     first copies each sequence's context into a contiguous staging buffer
//     (stage_context_kernel, one pass over the context per layer); one
//     thread then moves each tile with the bulk tensor copy engine, which
//     writes the swizzled layout below itself and completes on an mbarrier.
//   - Shared tiles use the 128-byte swizzle the tensor cores read without
//     bank conflicts: a tile is two panels of 64 head-dim elements; in a
//     panel, row r's 16-byte chunk c sits at chunk c ^ (r mod 8).
//   - Each warpgroup computes S = Q·Kᵀ (64 × 128, FP32 in registers) with
//     wgmma reading both operands from shared memory, runs the online softmax
//     on its registers, and accumulates O += P·V with P straight from
//     registers (the S accumulator layout is the A-fragment layout) and V
//     from shared memory, transposed by the instruction.
// Numerics are those of the portable kernel: BF16 operands, FP32 accumulation,
// exp2 on the scaled scores, P rounded to BF16 before the second product.
//
// Built only for sm_90a (its own target in src/CMakeLists.txt); on any other
// device code path the kernel body is empty and the launcher is never chosen.
#include <cuda_bf16.h>

#include <cfloat>
#include <cstdint>

#include "cuda/check.cuh"
#include "cuda/kernel_attributes.cuh"
#include "model/cuda/attention.h"
#include "model/cuda/attention_device.cuh"
#include "model/cuda/sm90.cuh"

namespace hiq::cuda {
namespace {

using namespace attention_device;
using namespace sm90;

constexpr int kD = 128;         // head_dim
constexpr int kRows = 128;      // rows per block: two warpgroups of 64
constexpr int kTile = 128;      // context tokens per K/V tile
constexpr int kThreads = 256;
constexpr int kPanelBytes = 64 * 2;  // one swizzle row: 64 BF16 elements
constexpr int kQBytes = kRows * kD * 2;
constexpr int kKvBytes = kTile * kD * 2;  // one K or V tile
constexpr int kStageBytes = 2 * kKvBytes;
constexpr int kStages = 3;
// Q, the stages, three barriers per stage (K full, V full, empty) and one for
// Q, and room to align the base to 1 KB.
constexpr int kSmemBytes = kQBytes + kStages * kStageBytes + (3 * kStages + 1) * 8 + 1024;
// Zero rows the staging buffer keeps after each sequence's context: a tile
// read past the context's end reads zeros, never the next sequence's values
// (P is 0 there, but 0 · inf would not be).
constexpr int kStagingPad = kTile;

// Byte offset of (row, 16-byte chunk) in a swizzled tile of `rows` rows.
__device__ __forceinline__ uint32_t swizzled(int rows, int row, int chunk) {
  return static_cast<uint32_t>((chunk / 8) * rows * kPanelBytes + row * kPanelBytes + (((chunk % 8) ^ (row % 8)) << 4));
}

#ifdef HIQ_SM90A_DEVICE
// The 64 FP32 accumulator registers of an m64n128 product, as asm operands.
#define HIQ_ACC8(d, i) \
  "+f"(d[i + 0]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define HIQ_ACC64(d)                                                                                        \
  HIQ_ACC8(d, 0), HIQ_ACC8(d, 8), HIQ_ACC8(d, 16), HIQ_ACC8(d, 24), HIQ_ACC8(d, 32), HIQ_ACC8(d, 40), \
      HIQ_ACC8(d, 48), HIQ_ACC8(d, 56)
#define HIQ_REGS64                                                                                         \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "  \
  "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "  \
  "%62, %63}"

// d (+)= A·B, m64n128k16, A and B from shared memory, both K-major.
__device__ __forceinline__ void wgmma_ss(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " HIQ_REGS64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
      : HIQ_ACC64(d)
      : "l"(a), "l"(b), "r"(accumulate));
}

// d += A·B, m64n128k16, A from registers, B from shared memory, MN-major.
__device__ __forceinline__ void wgmma_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " HIQ_REGS64
      ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : HIQ_ACC64(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
#undef HIQ_ACC8
#undef HIQ_ACC64
#undef HIQ_REGS64
#endif

// The context token of a tile this thread gathers (two threads per token,
// each taking every other 16-byte chunk, so a pair reads whole 32-byte
// sectors), and its L1 slot: looked up a tile ahead of its copies, so the
// copies never wait on the slot table.
__device__ __forceinline__ uint32_t slot_of(const uint32_t* slots, int tile, int kv_end) {
  const int token = tile * kTile + static_cast<int>(threadIdx.x) / 2;
  return token < kv_end ? __ldg(slots + token) : ~0u;
}

// Stages this thread's share of a K or V tile (`plane`) into `tile`: its
// token's chunks, or zeros past the context (their P is 0, but 0 · NaN from
// stale slot memory would not be).
__device__ __forceinline__ void load_tile(uint32_t tile, const __nv_bfloat16* plane, int kv_heads, uint32_t slot,
                                          int kv_head) {
  const int r = static_cast<int>(threadIdx.x) / 2, parity = static_cast<int>(threadIdx.x) % 2;
  const bool valid = slot != ~0u;
  const int64_t row = ((valid ? static_cast<int64_t>(slot) * kv_heads : 0) + kv_head) * kD;
#pragma unroll
  for (int k = 0; k < kD / 16; ++k) {
    const int c = 2 * k + parity;
    copy16_async(tile + swizzled(kTile, r, c), plane + row + c * 8, valid);
  }
}

#ifdef HIQ_SM90A_DEVICE
// Named barriers (0 is __syncthreads) that hand the tensor cores from one
// warpgroup to the other.
__device__ __forceinline__ void named_barrier_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}

// A K or V tile of staged rows [row, row + kTile) of `kv_head`: two boxes of
// 64 head-dim elements, one per swizzled panel.
__device__ __forceinline__ void bulk_copy_tile(uint32_t tile, const CUtensorMap& map, int kv_head, int row,
                                               uint32_t bar) {
  mbarrier_expect_bytes(bar, kKvBytes);
  bulk_copy_3d(tile, map, 0, kv_head, row, bar);
  bulk_copy_3d(tile + kTile * kPanelBytes, map, 64, kv_head, row, bar);
}

// S = Q·Kᵀ for the warpgroup's 64 rows (q0: the descriptor of its Q rows,
// built once a block): head_dim in steps of 16, 32 bytes into a panel, then
// the next panel.
// A step's descriptor is the first's advanced by a constant: the address
// field holds address / 16 in its low 14 bits, and no step leaves shared
// memory (under 256 KB), so the sum never carries out of the field. (Built
// from the address every step, the descriptors cost more integer
// instructions than the softmax: docs/benchmarks.md.)
__device__ __forceinline__ void issue_scores(float (&s)[64], uint64_t q0, uint32_t k_tile) {
  const uint64_t k0 = descriptor(k_tile, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const uint32_t in_panel = (kk % 4) * 32;
    wgmma_ss(s, q0 + (((kk / 4) * kRows * kPanelBytes + in_panel) >> 4),
             k0 + (((kk / 4) * kTile * kPanelBytes + in_panel) >> 4), kk > 0);
  }
}

// O += P·V, 16 context tokens per step. V is MN-major for this product: the
// leading offset steps between the two head-dim panels, the stride offset
// between 8-token groups.
__device__ __forceinline__ void issue_values(float (&o)[64], const uint32_t (&p)[kTile / 16][4], uint32_t v_tile) {
  const uint64_t v0 = descriptor(v_tile, kTile * kPanelBytes, 1024);
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) wgmma_rs(o, p[kk], v0 + ((kk * 16 * kPanelBytes) >> 4));
}
#endif

#ifdef HIQ_SM90A_DEVICE
// The running max and sum of a thread's two rows.
struct SoftmaxState {
  float row_max[2] = {-INFINITY, -INFINITY};  // in log2 units, scale applied
  float row_sum[2] = {0.f, 0.f};              // this thread's partial sums
};

// One tile of the online softmax: masks S (only a tile that reaches the
// diagonal or the context's end), rescales O and the running sum to the new
// max, and leaves P = exp2(S − max) in `p` as BF16 A fragments (two 8-token
// blocks of the S accumulators are one fragment).
__device__ __forceinline__ void softmax_to_p(float (&s)[64], float (&o)[64], uint32_t (&p)[kTile / 16][4],
                                             SoftmaxState& state, int kv0, int kv_end, int block_first_position,
                                             const int (&row_position)[2], float scale_log2, int lane) {
  // Most tiles need no mask: a branch the whole block takes alike, so the
  // unmasked tiles run no per-element test.
  if (kv0 + kTile > kv_end || kv0 + kTile - 1 > block_first_position) {
#pragma unroll
    for (int j = 0; j < kTile / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int token = kv0 + j * 8 + (lane % 4) * 2 + e % 2;
        if (token >= kv_end || token > row_position[e / 2]) s[j * 4 + e] = -INFINITY;
      }
  }
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < kTile / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) tile_max[e / 2] = fmaxf(tile_max[e / 2], s[j * 4 + e]);
  float correction[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
    tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
    // The scale is positive, so the max of the raw scores scales to the max
    // of the scaled ones, and each exponent below is one fused multiply-add.
    const float new_max = fmaxf(state.row_max[h], tile_max[h] * scale_log2);
    // A row that has seen nothing keeps max −inf: subtract 0, so exp2 gives 0, never NaN.
    const float shift = new_max == -INFINITY ? 0.f : new_max;
    correction[h] = fast_exp2(state.row_max[h] - shift);
    state.row_max[h] = new_max;
    state.row_sum[h] *= correction[h];
#pragma unroll
    for (int j = 0; j < kTile / 8; ++j)
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        s[j * 4 + e] = fast_exp2(fmaf(s[j * 4 + e], scale_log2, -shift));
        state.row_sum[h] += s[j * 4 + e];
      }
  }
#pragma unroll
  for (int j = 0; j < kD / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[j * 4 + e] *= correction[e / 2];
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) p[kk][i] = pack_bf16(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
}
#endif

// Schedule. K and V flow through three stages each; stage t mod 3 holds
// K(t) and V(t). The two warpgroups take turns on the tensor cores (named
// barriers 1 and 2): while one issues P·V of its tile and Q·Kᵀ of the next,
// the other runs its softmax, so neither unit waits on the other. Both
// arrive on empty[t] once iteration t's wait has seen S(t) and P·V(t − 1)
// done: K(t) and V(t − 1) are then free.
//   - kSm90: every thread gathers a share of each tile, two threads per
//     token, with the token's slot looked up a tile ahead. At iteration t it
//     copies K(t + 2) (before its softmax) and V(t + 1) (after), into the
//     stage empty[t − 1] freed, and publishes them on full[t + 1] first thing
//     at iteration t + 1.
//   - kSm90Staged: one thread issues bulk tensor copies that complete on
//     k_full[] and v_full[] by themselves. It is warpgroup 1's first thread,
//     which runs half a turn behind warpgroup 0: when it has passed
//     iteration t, so has the other, and empty[t] is complete without a wait
//     in practice. It then copies K(t + 3) and V(t + 2) into the stages K(t)
//     and V(t − 1) left, two turns before they are read.
// Measured on the H200 (bench attention, causal 8K / 16K, kSm90): lockstep
// with one __syncthreads per tile 345 / 355 TFLOP/s; taking turns 387 / 401;
// K and V copies split around the softmax and published early 452 / 477.
// kSm90Staged with thread 0 copying K(t + 2) and V(t + 1): 508 / 537.
template <bool kStaged>
__global__ void __launch_bounds__(kThreads, 1)
    attention_sm90_kernel(AttentionArgs a, const __grid_constant__ CUtensorMap k_map,
                          const __grid_constant__ CUtensorMap v_map) {
#ifdef HIQ_SM90A_DEVICE
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // The swizzle is a function of the address bits, so tiles start on 1 KB.
  const uint32_t base = (smem_address(smem_raw) + 1023) & ~1023u;
  const uint32_t q_tile = base;
  const uint32_t stages = base + kQBytes;
  // kSm90: full[] counts every thread's copies; kSm90Staged: full[] is K's
  // bulk copies and v_full[] V's.
  const uint32_t full = stages + kStages * kStageBytes, v_full = full + kStages * 8, empty = v_full + kStages * 8,
                 q_full = empty + kStages * 8;

  const int group = a.heads / a.kv_heads;
  const int seq_index = blockIdx.y / a.kv_heads, kv_head = blockIdx.y % a.kv_heads;
  const AttentionSequence seq = a.sequences[seq_index];
  const int rows = seq.q_len * group;
  // Longest rows first, as in attention.cu.
  const int block_row0 = (gridDim.x - 1 - blockIdx.x) * kRows;
  if (block_row0 >= rows) return;
  const int warpgroup = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int first_position = seq.kv_len - seq.q_len;
  const uint32_t* slots = a.slots + seq.slot_start;
  const int last_row = min(block_row0 + kRows, rows) - 1;
  const int kv_end = min(seq.kv_len, first_position + last_row / group + 1);
  // A tile that ends at or before the block's first row position, inside the
  // context, needs no mask.
  const int block_first_position = first_position + block_row0 / group;
  const int tiles = (kv_end + kTile - 1) / kTile;
  const auto k_tile = [&](int t) { return stages + (t % kStages) * kStageBytes; };
  const auto v_tile = [&](int t) { return stages + (t % kStages) * kStageBytes + kKvBytes; };
  const auto barrier = [](uint32_t bars, int t) { return bars + 8 * (t % kStages); };
  const auto phase_of = [](int t) { return static_cast<uint32_t>((t / kStages) & 1); };
  // kSm90Staged: the sequence's first row in the staging buffer, and the one thread that issues the copies.
  const int staged_row0 = seq.slot_start + seq_index * kStagingPad;
  const bool producer = kStaged && threadIdx.x == 128;
  const auto bulk_k = [&](int t) {
    bulk_copy_tile(k_tile(t), k_map, kv_head, staged_row0 + t * kTile, barrier(full, t));
  };
  const auto bulk_v = [&](int t) {
    bulk_copy_tile(v_tile(t), v_map, kv_head, staged_row0 + t * kTile, barrier(v_full, t));
  };

  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbarrier_init(full + 8 * i, kStaged ? 1 : kThreads);
      mbarrier_init(v_full + 8 * i, 1);
      mbarrier_init(empty + 8 * i, kThreads);
    }
    mbarrier_init(q_full, kThreads);
    // The bulk copies complete on these barriers through the async proxy.
    mbarrier_init_fence();
  }
  __syncthreads();
  if (producer) {
    for (int t = 0; t < min(tiles, kStages); ++t) bulk_k(t);
    for (int t = 0; t < min(tiles, kStages - 1); ++t) bulk_v(t);
  }

  // Q: the block's rows, gathered from the QKV buffer; rows past the end are zeros.
  for (int i = threadIdx.x; i < kRows * (kD / 8); i += kThreads) {
    const int r = i / (kD / 8), c = i % (kD / 8);
    const int row = block_row0 + r;
    const bool valid = row < rows;
    const __nv_bfloat16* src = a.q + (valid ? static_cast<int64_t>(seq.q_start + row / group) * a.q_token_stride +
                                                  (kv_head * group + row % group) * kD
                                            : 0) +
                               c * 8;
    copy16_async(q_tile + swizzled(kRows, r, c), src, valid);
  }
  // kSm90 copy groups: Q with K0; then K1 with V0; then, at iteration t,
  // K(t+2) with V(t+1). The group issued at iteration t − 1 lands by
  // iteration t and is published on full[t]: it holds the K of t + 1 and the
  // V of t, what the tensor-core turn of iteration t reads.
  static_assert(kThreads == 2 * kTile, "two threads gather each token of a tile");
  uint32_t v_slot = 0, k_slot = 0;  // kSm90: the slots of V(t + 1) and K(t + 2)
  if constexpr (kStaged) {
    async_commit();
    async_wait<0>();
  } else {
    const uint32_t slot0 = slot_of(slots, 0, kv_end), slot1 = slot_of(slots, 1, kv_end);
    load_tile(k_tile(0), a.k_plane, a.kv_heads, slot0, kv_head);
    async_commit();
    if (tiles > 1) load_tile(k_tile(1), a.k_plane, a.kv_heads, slot1, kv_head);
    load_tile(v_tile(0), a.v_plane, a.kv_heads, slot0, kv_head);
    async_commit();
    v_slot = slot1;
    k_slot = slot_of(slots, 2, kv_end);
    async_wait<1>();
  }
  // Copies are generic-proxy writes; wgmma reads through the async proxy.
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  mbarrier_arrive(q_full);

  // This thread's two rows of the accumulators: lane/4 and lane/4 + 8 of its warp's 16.
  int row_position[2];
  for (int h = 0; h < 2; ++h) {
    const int row = block_row0 + warpgroup * 64 + warp * 16 + lane / 4 + 8 * h;
    row_position[h] = row < rows ? first_position + row / group : -1;
  }
  const uint64_t q_desc = descriptor(q_tile + warpgroup * 64 * kPanelBytes, 16, 1024);
  const int my_turn = 1 + warpgroup, their_turn = 2 - warpgroup;

  float o[64], s[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.f;
  fence_registers(o);  // zeroed before any wgmma is in flight
  SoftmaxState softmax;
  uint32_t p[kTile / 16][4];
  const float scale_log2 = a.scale * kLog2e;

  // Warpgroup 0 goes first.
  if (warpgroup == 1) named_barrier_arrive(1);
  mbarrier_wait(q_full, 0);
  if constexpr (kStaged) mbarrier_wait(barrier(full, 0), 0);
  named_barrier_sync(my_turn);
  wgmma_fence();
  issue_scores(s, q_desc, k_tile(0));
  wgmma_commit();
  named_barrier_arrive(their_turn);

  // kSm90: publishes the copies issued an iteration ago, first thing, so the
  // other warpgroup never waits on this one's softmax.
  const auto publish = [&](int t) {
    if constexpr (!kStaged) {
      async_wait<0>();
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      mbarrier_arrive(barrier(full, t));
    }
  };
  // Waits for V(t) and K(t + 1), what the tensor-core turn of iteration t reads.
  const auto wait_operands = [&](int t, bool next_k) {
    if constexpr (kStaged) {
      mbarrier_wait(barrier(v_full, t), phase_of(t));
      if (next_k) mbarrier_wait(barrier(full, t + 1), phase_of(t + 1));
    } else {
      mbarrier_wait(barrier(full, t), phase_of(t));
    }
  };

  // Every tile but the last: its softmax, then P·V of it and Q·Kᵀ of the next.
  for (int t = 0; t + 1 < tiles; ++t) {
    const int kv0 = t * kTile;
    wgmma_wait_all();  // S of tile t, and P·V of tile t − 1: K(t) and V(t − 1) are free
    fence_registers(s);
    fence_registers(o);
    mbarrier_arrive(barrier(empty, t));
    publish(t);

    if constexpr (kStaged) {
      if (producer && t + 2 < tiles) {
        mbarrier_wait(barrier(empty, t), phase_of(t));
        if (t + 3 < tiles) bulk_k(t + 3);
        bulk_v(t + 2);
      }
      softmax_to_p(s, o, p, softmax, kv0, kv_end, block_first_position, row_position, scale_log2, lane);
    } else {
      // K(t + 2) and V(t + 1) overwrite K(t − 1) and V(t − 2). K goes before
      // the softmax, V after, so that neither burst of copies holds up the
      // turn on the tensor cores.
      if (t >= 1) mbarrier_wait(barrier(empty, t - 1), phase_of(t - 1));
      if (t + 2 < tiles) load_tile(k_tile(t + 2), a.k_plane, a.kv_heads, k_slot, kv_head);
      softmax_to_p(s, o, p, softmax, kv0, kv_end, block_first_position, row_position, scale_log2, lane);
      load_tile(v_tile(t + 1), a.v_plane, a.kv_heads, v_slot, kv_head);
      async_commit();
      v_slot = k_slot;
      k_slot = slot_of(slots, t + 3, kv_end);
    }
    wait_operands(t, /*next_k=*/true);

    named_barrier_sync(my_turn);
    fence_registers(o);
    fence_registers(s);
    wgmma_fence();
    issue_values(o, p, v_tile(t));
    issue_scores(s, q_desc, k_tile(t + 1));
    wgmma_commit();
    named_barrier_arrive(their_turn);
  }
  // The last tile: its softmax and P·V. Each warpgroup has synced tiles + 1
  // times on its barrier; warpgroup 1's last hand-over would have no taker.
  const int last = tiles - 1;
  wgmma_wait_all();
  fence_registers(s);
  fence_registers(o);
  publish(last);
  softmax_to_p(s, o, p, softmax, last * kTile, kv_end, block_first_position, row_position, scale_log2, lane);
  wait_operands(last, /*next_k=*/false);
  named_barrier_sync(my_turn);
  fence_registers(o);
  wgmma_fence();
  issue_values(o, p, v_tile(last));
  wgmma_commit();
  if (warpgroup == 0) named_barrier_arrive(their_turn);
  wgmma_wait_all();
  fence_registers(o);

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    softmax.row_sum[h] += __shfl_xor_sync(0xffffffffu, softmax.row_sum[h], 1);
    softmax.row_sum[h] += __shfl_xor_sync(0xffffffffu, softmax.row_sum[h], 2);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = block_row0 + warpgroup * 64 + warp * 16 + lane / 4 + 8 * h;
    if (row >= rows) continue;
    const float inv = softmax.row_sum[h] > 0.f ? 1.f / softmax.row_sum[h] : 0.f;
    __nv_bfloat16* out =
        a.out + (static_cast<int64_t>(seq.q_start + row / group) * a.heads + kv_head * group + row % group) * kD;
#pragma unroll
    for (int j = 0; j < kD / 8; ++j)
      *reinterpret_cast<__nv_bfloat162*>(out + j * 8 + (lane % 4) * 2) =
          __floats2bfloat162_rn(o[j * 4 + 2 * h] * inv, o[j * 4 + 2 * h + 1] * inv);
  }
#endif
}

// kSm90Staged's first step: sequence blockIdx.y's context, K and V, from L1
// by slot into its staging rows, then kStagingPad rows of zeros. A staged
// row is one token's [kv_heads][head_dim], 16 bytes a thread.
constexpr int kStageRowsPerBlock = 16;
__global__ void __launch_bounds__(kThreads)
    stage_context_kernel(AttentionArgs a, __nv_bfloat16* k_staged, __nv_bfloat16* v_staged) {
  const AttentionSequence seq = a.sequences[blockIdx.y];
  const int chunks = a.kv_heads * kD / 8;  // 16-byte chunks of a row
  const int first = blockIdx.x * kStageRowsPerBlock;
  if (first >= seq.kv_len + kStagingPad) return;
  const int64_t staged_row0 = static_cast<int64_t>(seq.slot_start) + static_cast<int64_t>(blockIdx.y) * kStagingPad;
  for (int i = threadIdx.x; i < kStageRowsPerBlock * chunks; i += kThreads) {
    const int token = first + i / chunks, c = i % chunks;
    if (token >= seq.kv_len + kStagingPad) break;
    uint4 k = make_uint4(0, 0, 0, 0), v = k;
    if (token < seq.kv_len) {
      const int64_t src = static_cast<int64_t>(__ldg(a.slots + seq.slot_start + token)) * chunks + c;
      k = __ldg(reinterpret_cast<const uint4*>(a.k_plane) + src);
      v = __ldg(reinterpret_cast<const uint4*>(a.v_plane) + src);
    }
    const int64_t dst = (staged_row0 + token) * chunks + c;
    reinterpret_cast<uint4*>(k_staged)[dst] = k;
    reinterpret_cast<uint4*>(v_staged)[dst] = v;
  }
}

// Staged rows of a call: every context, each followed by its padding.
int64_t staged_rows(const AttentionArgs& a) {
  return static_cast<int64_t>(a.context_entries) + static_cast<int64_t>(a.num_sequences) * kStagingPad;
}

// The tensor map of one staged plane: [row][kv_head][head_dim] BF16, boxes of
// 64 head-dim elements × 1 head × kTile rows, 128-byte swizzled.
Result<CUtensorMap> staged_plane_map(void* plane, const AttentionArgs& a) {
  HIQ_ASSIGN_OR_RETURN(const EncodeTiled encode, encode_tiled());
  const cuuint64_t dims[3] = {kD, static_cast<cuuint64_t>(a.kv_heads), static_cast<cuuint64_t>(staged_rows(a))};
  const cuuint64_t strides[2] = {kD * 2, static_cast<cuuint64_t>(a.kv_heads) * kD * 2};  // bytes, dims 1 and 2
  const cuuint32_t box[3] = {64, 1, kTile}, element_strides[3] = {1, 1, 1};
  CUtensorMap map{};
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, plane, dims, strides, box, element_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return internal_error("attention_sm90: cuTensorMapEncodeTiled failed (" + std::to_string(r) + ")");
  return map;
}

template <bool kStaged>
Status launch_kernel(const AttentionArgs& a, const CUtensorMap& k_map, const CUtensorMap& v_map, cudaStream_t stream) {
  HIQ_RETURN_IF_ERROR(allow_dynamic_shared_memory<attention_sm90_kernel<kStaged>>(static_cast<int>(kSmemBytes)));
  const int row_tiles = (a.max_q_len * (a.heads / a.kv_heads) + kRows - 1) / kRows;
  const dim3 grid(static_cast<unsigned>(row_tiles), static_cast<unsigned>(a.num_sequences * a.kv_heads));
  attention_sm90_kernel<kStaged><<<grid, kThreads, kSmemBytes, stream>>>(a, k_map, v_map);
  return cuda_status(cudaGetLastError(), "attention_sm90_kernel");
}

}  // namespace

Result<EncodeTiled> encode_tiled() {
  static void* function = nullptr;
  static const cudaError_t found = [] {
    cudaDriverEntryPointQueryResult result{};
    const cudaError_t e =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000, cudaEnableDefault, &result);
    return e == cudaSuccess && result != cudaDriverEntryPointSuccess ? cudaErrorNotSupported : e;
  }();
  HIQ_CUDA_RETURN_IF_ERROR(found);
  return reinterpret_cast<EncodeTiled>(function);
}

bool attention_sm90_supports(const AttentionArgs& a) {
  return a.head_dim == kD && a.splits == 1 && a.heads % a.kv_heads == 0;
}

size_t attention_staging_bytes(const AttentionArgs& a) {
  if (a.kernel != AttentionKernel::kSm90Staged) return 0;
  return 2 * static_cast<size_t>(staged_rows(a)) * static_cast<size_t>(a.kv_heads) * static_cast<size_t>(a.head_dim) *
         sizeof(__nv_bfloat16);
}

Status launch_attention_sm90(const AttentionArgs& a, cudaStream_t stream) {
  if (!attention_sm90_supports(a)) return invalid_argument("attention_sm90: needs head_dim 128 and one context split");
  if (a.kernel != AttentionKernel::kSm90Staged) return launch_kernel<false>(a, CUtensorMap{}, CUtensorMap{}, stream);
  if (a.staging == nullptr || a.context_entries <= 0)
    return invalid_argument("attention_sm90: the staged kernel needs its staging buffer and the context's size");
  auto* k_staged = static_cast<__nv_bfloat16*>(a.staging);
  __nv_bfloat16* v_staged = k_staged + staged_rows(a) * a.kv_heads * kD;
  const dim3 stage_grid(
      static_cast<unsigned>((a.max_kv_len + kStagingPad + kStageRowsPerBlock - 1) / kStageRowsPerBlock),
      static_cast<unsigned>(a.num_sequences));
  stage_context_kernel<<<stage_grid, kThreads, 0, stream>>>(a, k_staged, v_staged);
  HIQ_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  HIQ_ASSIGN_OR_RETURN(const CUtensorMap k_map, staged_plane_map(k_staged, a));
  HIQ_ASSIGN_OR_RETURN(const CUtensorMap v_map, staged_plane_map(v_staged, a));
  return launch_kernel<true>(a, k_map, v_map, stream);
}

}  // namespace hiq::cuda
