#include "model/cuda/skinny_gemm.h"

#include <algorithm>
#include <cstdint>

#include "cuda/check.cuh"
#include "cuda/kernel_attributes.cuh"
#include "model/cuda/dependent_launch.cuh"
#include "model/cuda/layer_steps.cuh"

namespace hiq::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kColumns = 16;  // output columns (weight rows) per block: the mma's M
constexpr int kChunk = 32;    // k per warp step: two mma k-steps
// Chunks a warp has in flight: fewer when more rows of x take registers.
// At one 8-row tile (every decode step of ≤ 8 rows) six take 124 registers,
// so two blocks still fit a multiprocessor. A change that takes more than
// 128 halves that: check `-Xptxas -v` (bounding the launch to two blocks
// instead changes the code ptxas makes, so it needs its own measurement).
// On the H100 six (with the L2 prefetch below) streamed 0.96–0.99× the time
// of four, and eight (one block a multiprocessor) 1.02–1.03×
// (docs/benchmarks.md).
template <int kTiles>
constexpr int kUnroll = kTiles == 1 ? 6 : kTiles <= 2 ? 4 : 2;
constexpr int kSmemRowPad = 32;  // elements after each row of x in shared memory (64 bytes)
// Shared memory a normalising product may take for x: two blocks still fit a multiprocessor.
constexpr size_t kMostNormalizedBytes = 96 * 1024;

size_t normalized_bytes(int m, int k) {
  return static_cast<size_t>(m) * static_cast<size_t>(k + kSmemRowPad) * sizeof(__nv_bfloat16);
}

__device__ __forceinline__ uint4 load_stream(const void* p) {
  // Weights are read once per product: keep them out of L1. A warp's load
  // takes 64 bytes of each of 16 rows, and the block's other warps the rest
  // of the row's next 512 bytes: asking L2 to fetch 256 bytes at a time
  // turns four requests to device memory into one, and took 0.97× the time
  // of a decode step on the H100.
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// x's rows [0, m) into shared memory, each RMS-normalised and scaled by
// fusion.norm_weight: the bits launch_add_rms_norm writes, its sums being
// added in the same order (layer_steps.cuh). Called by the whole block.
template <int kRows>
__device__ __forceinline__ void normalize_into_shared(const __nv_bfloat16* x, int m, int k, const SkinnyFusion& fusion,
                                                      unsigned char* smem, float* rstd) {
  auto* rows = reinterpret_cast<Bf16x8*>(smem);
  const int row_chunks = (k + kSmemRowPad) / 8;  // 16-byte chunks per shared row
  float squares[kRows] = {};
  for (int i = threadIdx.x; i < k / 8; i += kThreads) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r >= m) break;
      const Bf16x8 v = reinterpret_cast<const Bf16x8*>(x + static_cast<int64_t>(r) * k)[i];
      rows[r * row_chunks + i] = v;
      rms_add_squares(v, squares[r]);
    }
  }
  rms_block_sum(squares, k, fusion.norm_eps, rstd);
  const auto* weight = reinterpret_cast<const Bf16x8*>(fusion.norm_weight);
  for (int i = threadIdx.x; i < k / 8; i += kThreads) {
    const Bf16x8 g = weight[i];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r >= m) break;
      Bf16x8& v = rows[r * row_chunks + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 f = __bfloat1622float2(v.v[j]), w = __bfloat1622float2(g.v[j]);
        v.v[j] = __floats2bfloat162_rn(rms_scale(f.x, rstd[r], w.x), rms_scale(f.y, rstd[r], w.y));
      }
    }
  }
  __syncthreads();
}

// The outputs of one column tile from the warps' partial sums, added in warp
// order. The accumulator layout: element j of lane l is A row l/4 (j < 2) or
// l/4 + 8 (j ≥ 2), x row 2·(l mod 4) + (j mod 2) of its 8-row tile.
template <int kTiles>
__device__ __forceinline__ void store_outputs(const float (&partial)[kWarps][kTiles][32][4], int column0, int m, int n,
                                              void* y, bool y_fp32, const SkinnyFusion& fusion) {
  const auto sum_of = [&](int t, int l, int j) {
    float sum = 0.f;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) sum += partial[v][t][l][j];
    return sum;
  };
  if (fusion.silu_gate) {  // one output per thread and (gate, up) pair: A rows l/4 and l/4 + 8
    for (int i = threadIdx.x; i < kTiles * 32 * 2; i += kThreads) {
      const int t = i / 64, l = (i / 2) % 32, j = i % 2;
      const int column = column0 + l / 4, row = t * 8 + (l % 4) * 2 + j;
      if (column >= n || row >= m) continue;
      const float gate = round_to_bf16(sum_of(t, l, j)), up = round_to_bf16(sum_of(t, l, j + 2));
      static_cast<__nv_bfloat16*>(y)[static_cast<int64_t>(row) * n + column] =
          __float2bfloat16_rn(silu_times(gate, up));
    }
    return;
  }
  for (int i = threadIdx.x; i < kTiles * 32 * 4; i += kThreads) {  // one output element per thread
    const int t = i / 128, l = (i / 4) % 32, j = i % 4;
    const int column = column0 + l / 4 + (j >= 2 ? 8 : 0), row = t * 8 + (l % 4) * 2 + (j & 1);
    if (column >= n || row >= m) continue;
    const float sum = sum_of(t, l, j);
    const int64_t at = static_cast<int64_t>(row) * n + column;
    if (y_fp32) {
      static_cast<float*>(y)[at] = sum;
    } else {
      auto* out = static_cast<__nv_bfloat16*>(y) + at;
      // A residual add rounds the product first, as adding a BF16 layer output does.
      *out = __float2bfloat16_rn(fusion.add_to_y ? __bfloat162float(*out) + round_to_bf16(sum) : sum);
    }
  }
}

// The k order. A lane's 16-byte loads cover 8 consecutive k of one row; the
// mma fragments want k pairs {2q, 2q + 1} and {2q + 8, 2q + 9} (q = lane mod
// 4) of each 16-k step. A dot product does not care in which order its terms
// come, so the two steps of a chunk read lane q's 8 elements as their
// "logical" k: step s takes physical elements 8q + 4s + {0, 1} as {2q, 2q+1}
// and 8q + 4s + {2, 3} as {2q + 8, 2q + 9}, for the weights (A) and x (B)
// alike. Registers 2s and 2s + 1 of a load are step s's two pairs.
//
// With kNormalize, x is first copied into shared memory (rows padded by 64
// bytes, so the 8 rows a quarter-warp reads fall in different banks) and
// normalised there, once per block for all the column tiles it takes; the
// loop then reads it from there.
template <int kTiles, bool kNormalize>  // 8-row tiles of x: m ≤ 8 · kTiles
__global__ void __launch_bounds__(kThreads)
    skinny_gemm_kernel(const __nv_bfloat16* __restrict__ x, int m, const __nv_bfloat16* __restrict__ w, int n, int k,
                       void* __restrict__ y, bool y_fp32, SkinnyFusion fusion) {
  static_assert(kThreads == kRmsThreads, "the norm's order of summation is that of its own kernel");
  extern __shared__ __align__(16) unsigned char x_smem[];
  __shared__ float partial[kWarps][kTiles][32][4];
  __shared__ float rstd[kTiles * 8];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane / 4, quad = lane % 4;
  const int x_stride = kNormalize ? k + kSmemRowPad : k;  // elements
  const __nv_bfloat16* x_base = kNormalize ? reinterpret_cast<const __nv_bfloat16*>(x_smem) : x;
  const __nv_bfloat16* x_row[kTiles];
  bool x_valid[kTiles];
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    const int r = t * 8 + group;
    x_valid[t] = r < m;
    x_row[t] = x_base + static_cast<int64_t>(x_valid[t] ? r : 0) * x_stride + quad * 8;
  }
  // A column tile is kColumns outputs: weight rows lo (A rows 0–7) and hi
  // (8–15); gating pairs gate row c with up row n + c, so its tile is 8
  // outputs. Blocks take tiles blockIdx.x, + gridDim.x, …: one each, but for
  // a normalising product, whose grid is what fits the GPU at once, so that
  // it stages x once per block rather than once per tile.
  const int columns = fusion.silu_gate ? kColumns / 2 : kColumns;
  const int tiles = (n + columns - 1) / columns;
  const int rows_total = fusion.silu_gate ? 2 * n : n;
  constexpr int kDepth = kUnroll<kTiles>;
  const int chunks = k / kChunk;

  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int column0 = tile * columns;
    // This lane's two weight rows (clamped: a row past the end is read, never stored).
    const int64_t row_lo = min(column0 + group, n - 1);
    const int64_t row_hi =
        fusion.silu_gate ? min(n + column0 + group, rows_total - 1) : min(column0 + group + 8, n - 1);
    const __nv_bfloat16* w_lo = w + row_lo * k + quad * 8;
    const __nv_bfloat16* w_hi = w + row_hi * k + quad * 8;
    float acc[kTiles][4] = {};
    uint4 a_lo[kDepth], a_hi[kDepth], b[kDepth][kTiles];
    // Warp `warp` takes chunks warp, warp + 8, …: a block's warps read each row in 512-byte runs.
    const auto load_weights = [&](int c0) {
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        const int c = c0 + u * kWarps;
        if (c < chunks) {
          a_lo[u] = load_stream(w_lo + c * kChunk);
          a_hi[u] = load_stream(w_hi + c * kChunk);
        }
      }
    };
    load_weights(warp);
    if (tile == blockIdx.x) {
      // The weights are no output of the kernel before: their first chunks
      // are in flight before x, which is, may be read.
      wait_for_prerequisites();
      if constexpr (kNormalize) normalize_into_shared<kTiles * 8>(x, m, k, fusion, x_smem, rstd);
    }
    for (int c0 = warp; c0 < chunks; c0 += kWarps * kDepth) {
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        const int c = c0 + u * kWarps;
        if (c < chunks) {
#pragma unroll
          for (int t = 0; t < kTiles; ++t) {
            const auto* chunk = reinterpret_cast<const uint4*>(x_row[t] + c * kChunk);
            b[u][t] = !x_valid[t] ? make_uint4(0, 0, 0, 0) : kNormalize ? *chunk : __ldg(chunk);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        if (c0 + u * kWarps >= chunks) break;
#pragma unroll
        for (int t = 0; t < kTiles; ++t) {
          mma_bf16(acc[t], a_lo[u].x, a_hi[u].x, a_lo[u].y, a_hi[u].y, b[u][t].x, b[u][t].y);
          mma_bf16(acc[t], a_lo[u].z, a_hi[u].z, a_lo[u].w, a_hi[u].w, b[u][t].z, b[u][t].w);
        }
      }
      load_weights(c0 + kWarps * kDepth);
    }
    if (tile + gridDim.x >= tiles) allow_dependents();

#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int j = 0; j < 4; ++j) partial[warp][t][lane][j] = acc[t][j];
    __syncthreads();
    store_outputs<kTiles>(partial, column0, m, n, y, y_fp32, fusion);
    __syncthreads();  // the next tile overwrites `partial`
  }
}

}  // namespace

bool skinny_gemm_supports(const void* x, int m, const void* w, int k, const void* y, cudaDataType_t y_type) {
  return m >= 1 && m <= kSkinnyMaxRows && k > 0 && k % kChunk == 0 && aligned16(x) && aligned16(w) && aligned16(y) &&
         (y_type == CUDA_R_16BF || y_type == CUDA_R_32F);
}

bool skinny_fusion_supports(int m, int k, const SkinnyFusion& fusion, cudaDataType_t y_type) {
  if (fusion.silu_gate && fusion.add_to_y) return false;
  if ((fusion.silu_gate || fusion.add_to_y) && y_type != CUDA_R_16BF) return false;
  return fusion.norm_weight == nullptr ||
         (aligned16(fusion.norm_weight) && normalized_bytes(m, k) <= kMostNormalizedBytes);
}

namespace {

template <int kTiles, bool kNormalize>
Status launch_tiles(unsigned tiles, cudaStream_t stream, const __nv_bfloat16* x, int m, const __nv_bfloat16* w, int n,
                    int k, void* y, bool fp32, const SkinnyFusion& fusion) {
  constexpr auto kKernel = skinny_gemm_kernel<kTiles, kNormalize>;
  dim3 grid(tiles);
  size_t shared_bytes = 0;
  if constexpr (kNormalize) {
    // More than 48 KB of dynamic shared memory must be asked for, on each device.
    HIQ_RETURN_IF_ERROR(allow_dynamic_shared_memory<kKernel>(static_cast<int>(kMostNormalizedBytes)));
    shared_bytes = normalized_bytes(m, k);
    // As many blocks as are resident at once, each staging x once for the tiles it takes.
    int device = 0, multiprocessors = 0, per_multiprocessor = 0;
    HIQ_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
    HIQ_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
    HIQ_CUDA_RETURN_IF_ERROR(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kKernel, kThreads, shared_bytes));
    grid.x = std::min(grid.x, static_cast<unsigned>(std::max(1, per_multiprocessor * multiprocessors)));
  }
  // A dependent launch: the kernel streams its first weights while the one before it finishes.
  return launch_dependent("skinny_gemm_kernel", kKernel, grid, dim3(kThreads), shared_bytes, stream, x, m, w, n, k, y,
                          fp32, fusion);
}

template <bool kNormalize>
Status launch_rows(unsigned tiles, cudaStream_t stream, const __nv_bfloat16* x, int m, const __nv_bfloat16* w, int n,
                   int k, void* y, bool fp32, const SkinnyFusion& fusion) {
  switch ((m + 7) / 8) {
    case 1:
      return launch_tiles<1, kNormalize>(tiles, stream, x, m, w, n, k, y, fp32, fusion);
    case 2:
      return launch_tiles<2, kNormalize>(tiles, stream, x, m, w, n, k, y, fp32, fusion);
    case 3:
      return launch_tiles<3, kNormalize>(tiles, stream, x, m, w, n, k, y, fp32, fusion);
    default:
      return launch_tiles<4, kNormalize>(tiles, stream, x, m, w, n, k, y, fp32, fusion);
  }
}

}  // namespace

Status launch_skinny_gemm(const __nv_bfloat16* x, int m, const __nv_bfloat16* w, int n, int k, void* y,
                          cudaDataType_t y_type, cudaStream_t stream, const SkinnyFusion& fusion) {
  if (!skinny_gemm_supports(x, m, w, k, y, y_type) || n <= 0)
    return invalid_argument("skinny_gemm: needs 1 ≤ m ≤ 32, k a multiple of 32 and 16-byte aligned operands");
  if (!skinny_fusion_supports(m, k, fusion, y_type))
    return invalid_argument(
        "skinny_gemm: this fusion needs a BF16 output, one epilogue, and x small enough to "
        "normalise in shared memory");
  const int columns = fusion.silu_gate ? kColumns / 2 : kColumns;
  const auto tiles = static_cast<unsigned>((n + columns - 1) / columns);
  const bool fp32 = y_type == CUDA_R_32F;
  return fusion.norm_weight != nullptr ? launch_rows<true>(tiles, stream, x, m, w, n, k, y, fp32, fusion)
                                       : launch_rows<false>(tiles, stream, x, m, w, n, k, y, fp32, fusion);
}

}  // namespace hiq::cuda
