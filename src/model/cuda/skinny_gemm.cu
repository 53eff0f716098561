#include "model/cuda/skinny_gemm.h"

#include <cstdint>

#include "cuda/check.cuh"
#include "model/cuda/dependent_launch.cuh"

namespace hiq::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kColumns = 16;  // output columns (weight rows) per block: the mma's M
constexpr int kChunk = 32;    // k per warp step: two mma k-steps
// Chunks a warp has in flight: fewer when more rows of x take registers.
template <int kTiles>
constexpr int kUnroll = kTiles <= 2 ? 4 : 2;

__device__ __forceinline__ uint4 load_stream(const void* p) {
  // Weights are read once per product: keep them out of L1.
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
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

// The k order. A lane's 16-byte loads cover 8 consecutive k of one row; the
// mma fragments want k pairs {2q, 2q + 1} and {2q + 8, 2q + 9} (q = lane mod
// 4) of each 16-k step. A dot product does not care in which order its terms
// come, so the two steps of a chunk read lane q's 8 elements as their
// "logical" k: step s takes physical elements 8q + 4s + {0, 1} as {2q, 2q+1}
// and 8q + 4s + {2, 3} as {2q + 8, 2q + 9}, for the weights (A) and x (B)
// alike. Registers 2s and 2s + 1 of a load are step s's two pairs.
template <int kTiles>  // 8-row tiles of x: m ≤ 8 · kTiles
__global__ void __launch_bounds__(kThreads)
    skinny_gemm_kernel(const __nv_bfloat16* __restrict__ x, int m, const __nv_bfloat16* __restrict__ w, int n, int k,
                       void* __restrict__ y, bool y_fp32) {
  __shared__ float partial[kWarps][kTiles][32][4];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane / 4, quad = lane % 4;
  const int column0 = blockIdx.x * kColumns;
  // This lane's two weight rows (clamped: a row past n is read, never stored) and x rows.
  const int64_t row_lo = min(column0 + group, n - 1), row_hi = min(column0 + group + 8, n - 1);
  const __nv_bfloat16* w_lo = w + row_lo * k + quad * 8;
  const __nv_bfloat16* w_hi = w + row_hi * k + quad * 8;
  const __nv_bfloat16* x_row[kTiles];
  bool x_valid[kTiles];
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    const int r = t * 8 + group;
    x_valid[t] = r < m;
    x_row[t] = x + static_cast<int64_t>(x_valid[t] ? r : 0) * k + quad * 8;
  }

  constexpr int kDepth = kUnroll<kTiles>;
  float acc[kTiles][4] = {};
  const int chunks = k / kChunk;
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
  // The weights are no output of the kernel before: their first chunks are
  // in flight before x, which is, may be read.
  load_weights(warp);
  wait_for_prerequisites();
  for (int c0 = warp; c0 < chunks; c0 += kWarps * kDepth) {
#pragma unroll
    for (int u = 0; u < kDepth; ++u) {
      const int c = c0 + u * kWarps;
      if (c < chunks) {
#pragma unroll
        for (int t = 0; t < kTiles; ++t)
          b[u][t] = x_valid[t] ? __ldg(reinterpret_cast<const uint4*>(x_row[t] + c * kChunk)) : make_uint4(0, 0, 0, 0);
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
  allow_dependents();

#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int j = 0; j < 4; ++j) partial[warp][t][lane][j] = acc[t][j];
  __syncthreads();
  // One output element per thread: the warps' partial sums in warp order.
  for (int i = threadIdx.x; i < kTiles * 32 * 4; i += kThreads) {
    const int t = i / 128, l = (i / 4) % 32, j = i % 4;
    float sum = 0.f;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) sum += partial[v][t][l][j];
    // The accumulator layout: rows (columns of y) l/4 and l/4 + 8, x rows 2·(l mod 4) + {0, 1}.
    const int column = column0 + l / 4 + (j >= 2 ? 8 : 0), row = t * 8 + (l % 4) * 2 + (j & 1);
    if (column >= n || row >= m) continue;
    const int64_t at = static_cast<int64_t>(row) * n + column;
    if (y_fp32)
      static_cast<float*>(y)[at] = sum;
    else
      static_cast<__nv_bfloat16*>(y)[at] = __float2bfloat16_rn(sum);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool skinny_gemm_supports(const void* x, int m, const void* w, int k, const void* y, cudaDataType_t y_type) {
  return m >= 1 && m <= kSkinnyMaxRows && k > 0 && k % kChunk == 0 && aligned16(x) && aligned16(w) && aligned16(y) &&
         (y_type == CUDA_R_16BF || y_type == CUDA_R_32F);
}

Status launch_skinny_gemm(const __nv_bfloat16* x, int m, const __nv_bfloat16* w, int n, int k, void* y,
                          cudaDataType_t y_type, cudaStream_t stream) {
  if (!skinny_gemm_supports(x, m, w, k, y, y_type) || n <= 0)
    return invalid_argument("skinny_gemm: needs 1 ≤ m ≤ 32, k a multiple of 32 and 16-byte aligned operands");
  // A dependent launch: the kernel streams its first weights while the one before it finishes.
  cudaLaunchAttribute dependent{};
  dependent.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  dependent.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>((n + kColumns - 1) / kColumns));
  config.blockDim = dim3(kThreads);
  config.stream = stream;
  config.attrs = &dependent;
  config.numAttrs = 1;
  const bool fp32 = y_type == CUDA_R_32F;
  switch ((m + 7) / 8) {
    case 1:
      HIQ_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&config, skinny_gemm_kernel<1>, x, m, w, n, k, y, fp32));
      break;
    case 2:
      HIQ_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&config, skinny_gemm_kernel<2>, x, m, w, n, k, y, fp32));
      break;
    case 3:
      HIQ_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&config, skinny_gemm_kernel<3>, x, m, w, n, k, y, fp32));
      break;
    default:
      HIQ_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&config, skinny_gemm_kernel<4>, x, m, w, n, k, y, fp32));
      break;
  }
  return cuda_status(cudaGetLastError(), "skinny_gemm_kernel");
}

}  // namespace hiq::cuda
