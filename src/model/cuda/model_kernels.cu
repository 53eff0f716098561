#include <algorithm>
#include <cfloat>

#include "cuda/check.cuh"
#include "model/cuda/dependent_launch.cuh"
#include "model/cuda/layer_steps.cuh"
#include "model/cuda/model_kernels.h"

namespace hiq::cuda {
namespace {

__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The sum of `v` over the block (blockDim.x a multiple of 32, ≤ 1024).
__device__ float block_sum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    float w = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.f;
    w = warp_sum(w);
    if (threadIdx.x == 0) total = w;
  }
  __syncthreads();
  return total;
}

__global__ void gather_rows_kernel(const bf16* table, const int32_t* rows, int width, bf16* out) {
  const int64_t r = blockIdx.x;
  const bf16* src = table + static_cast<int64_t>(rows[r]) * width;
  bf16* dst = out + r * width;
  if (width % 8 == 0) {
    for (int i = threadIdx.x; i < width / 8; i += blockDim.x)
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  } else {
    for (int i = threadIdx.x; i < width; i += blockDim.x) dst[i] = src[i];
  }
}

// One block per row. Rows whose width is a multiple of 8 go 16 bytes at a
// time, with kRmsThreads threads and the sums in layer_steps.cuh's order (the
// decode products that normalise their own input give the same bits); a
// thread keeps up to kHeldChunks of its chunks, and of the weight's, in
// registers. A dependent launch: the weight (no kernel's output) is read
// before the wait for the kernel before, which wrote x or delta.
constexpr int kHeldChunks = 4;  // rows up to 8,192 wide are held whole
__global__ void add_rms_norm_kernel(bf16* x, const bf16* delta, const bf16* weight, int width, float eps, bf16* out) {
  allow_dependents();  // the matrix product after it may start on its weights
  const int64_t base = static_cast<int64_t>(blockIdx.x) * width;
  if (width % 8 == 0) {
    const int chunks = width / 8;
    const auto* w8 = reinterpret_cast<const Bf16x8*>(weight);
    Bf16x8 held_w[kHeldChunks], held_x[kHeldChunks];
#pragma unroll
    for (int j = 0; j < kHeldChunks; ++j) {
      const int i = static_cast<int>(threadIdx.x) + j * kRmsThreads;
      if (i < chunks) held_w[j] = w8[i];
    }
    wait_for_prerequisites();
    __shared__ float rstd[1];
    float squares[1] = {0.f};
    auto* x8 = reinterpret_cast<Bf16x8*>(x + base);
    const auto* d8 = reinterpret_cast<const Bf16x8*>(delta + base);
    // x += delta, and the sum of squares: chunk i = threadIdx.x + j · kRmsThreads, j ascending.
    const auto add = [&](int i) {
      Bf16x8 v = x8[i];
      if (delta != nullptr) {
        const Bf16x8 d = d8[i];
        for (int e = 0; e < 4; ++e) v.v[e] = __floats2bfloat162_rn(__low2float(v.v[e]) + __low2float(d.v[e]),
                                                                   __high2float(v.v[e]) + __high2float(d.v[e]));
        x8[i] = v;
      }
      rms_add_squares(v, squares[0]);
      return v;
    };
    const auto scale = [&](int i, const Bf16x8& v, const Bf16x8& w) {
      Bf16x8 o;
      for (int e = 0; e < 4; ++e) {
        const float2 f = __bfloat1622float2(v.v[e]), g = __bfloat1622float2(w.v[e]);
        o.v[e] = __floats2bfloat162_rn(rms_scale(f.x, rstd[0], g.x), rms_scale(f.y, rstd[0], g.y));
      }
      reinterpret_cast<Bf16x8*>(out + base)[i] = o;
    };
    const int first_unheld = static_cast<int>(threadIdx.x) + kHeldChunks * kRmsThreads;
#pragma unroll
    for (int j = 0; j < kHeldChunks; ++j) {
      const int i = static_cast<int>(threadIdx.x) + j * kRmsThreads;
      if (i < chunks) held_x[j] = add(i);
    }
    for (int i = first_unheld; i < chunks; i += kRmsThreads) add(i);
    rms_block_sum(squares, width, eps, rstd);
#pragma unroll
    for (int j = 0; j < kHeldChunks; ++j) {
      const int i = static_cast<int>(threadIdx.x) + j * kRmsThreads;
      if (i < chunks) scale(i, held_x[j], held_w[j]);
    }
    for (int i = first_unheld; i < chunks; i += kRmsThreads) scale(i, x8[i], w8[i]);
    return;
  }
  wait_for_prerequisites();
  float squares = 0.f;
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    float v = to_float(x[base + i]);
    if (delta != nullptr) {
      v = round_to_bf16(v + to_float(delta[base + i]));
      x[base + i] = __float2bfloat16_rn(v);
    }
    squares += v * v;
  }
  const float rstd = rsqrtf(block_sum(squares) / static_cast<float>(width) + eps);
  for (int i = threadIdx.x; i < width; i += blockDim.x)
    out[base + i] = __float2bfloat16_rn(round_to_bf16(to_float(x[base + i]) * rstd) * to_float(weight[i]));
}

__global__ void add_bias_kernel(bf16* x, const bf16* bias, int64_t n, int width) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = __float2bfloat16_rn(to_float(x[i]) + to_float(bias[i % width]));
}

// One warp per (token, head) (q heads, then k, then v): blocks of
// kQkvWarps heads of one token, blockIdx.x the token. Every head of a decode
// step is then finished at once instead of a block's warps taking them in
// turns. Lane l holds the RoPE pairs (j, j + d/2) for j = l, l + 32, … < d/2.
constexpr int kMaxPairsPerLane = 4;  // head_dim ≤ 256
constexpr int kQkvWarps = 8;
__global__ void __launch_bounds__(kQkvWarps * 32) qkv_finish_kernel(QkvArgs a) {
  allow_dependents();        // the attention after it may be scheduled, and wait for it
  wait_for_prerequisites();  // a dependent launch: the product before wrote qkv
  const int t = blockIdx.x, warp = blockIdx.y * kQkvWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  const int d = a.head_dim, half = d / 2;
  const int width = (a.heads + 2 * a.kv_heads) * d;
  bf16* row = a.qkv + static_cast<int64_t>(t) * width;
  const float position = static_cast<float>(a.positions[t]);
  const bool store = a.slots[t] != kNoKvSlot;
  for (int head = warp; head < a.heads + 2 * a.kv_heads; head += gridDim.y * kQkvWarps) {
    bf16* x = row + head * d;
    const bf16* bias = a.bias != nullptr ? a.bias + head * d : nullptr;
    float lo[kMaxPairsPerLane], hi[kMaxPairsPerLane];
    float squares = 0.f;
#pragma unroll
    for (int p = 0; p < kMaxPairsPerLane; ++p) {
      const int j = lane + 32 * p;
      lo[p] = hi[p] = 0.f;
      if (j < half) {
        lo[p] = to_float(x[j]);
        hi[p] = to_float(x[j + half]);
        if (bias != nullptr) {
          lo[p] = round_to_bf16(lo[p] + to_float(bias[j]));
          hi[p] = round_to_bf16(hi[p] + to_float(bias[j + half]));
        }
        squares += lo[p] * lo[p] + hi[p] * hi[p];
      }
    }
    const bool is_q = head < a.heads, is_k = !is_q && head < a.heads + a.kv_heads;
    if (!is_q && !store) continue;
    if (!is_q && !is_k) {  // v: straight into L1
      bf16* dst = a.v_plane + static_cast<int64_t>(a.slots[t]) * a.kv_heads * d + (head - a.heads - a.kv_heads) * d;
#pragma unroll
      for (int p = 0; p < kMaxPairsPerLane; ++p) {
        const int j = lane + 32 * p;
        if (j < half) {
          dst[j] = __float2bfloat16_rn(lo[p]);
          dst[j + half] = __float2bfloat16_rn(hi[p]);
        }
      }
      continue;
    }
    const bf16* norm = is_q ? a.q_norm : a.k_norm;
    if (norm != nullptr) {
      const float rstd = rsqrtf(warp_sum(squares) / static_cast<float>(d) + a.eps);
#pragma unroll
      for (int p = 0; p < kMaxPairsPerLane; ++p) {
        const int j = lane + 32 * p;
        if (j < half) {
          lo[p] = round_to_bf16(round_to_bf16(lo[p] * rstd) * to_float(norm[j]));
          hi[p] = round_to_bf16(round_to_bf16(hi[p] * rstd) * to_float(norm[j + half]));
        }
      }
    }
    bf16* dst = is_q ? x
                     : a.k_plane + static_cast<int64_t>(a.slots[t]) * a.kv_heads * d + (head - a.heads) * d;
#pragma unroll
    for (int p = 0; p < kMaxPairsPerLane; ++p) {
      const int j = lane + 32 * p;
      if (j >= half) continue;
      // x·cos + rotate_half(x)·sin, with cos and sin in BF16 and each product
      // and sum rounded, as the reference computes it in bf16.
      const float theta = position * a.inv_freq[j];
      const float c = round_to_bf16(cosf(theta) * a.rope_scale), s = round_to_bf16(sinf(theta) * a.rope_scale);
      const float new_lo = round_to_bf16(lo[p] * c) + round_to_bf16(-hi[p] * s);
      const float new_hi = round_to_bf16(hi[p] * c) + round_to_bf16(lo[p] * s);
      dst[j] = __float2bfloat16_rn(new_lo);
      dst[j + half] = __float2bfloat16_rn(new_hi);
    }
  }
}

// Eight outputs per thread when the width is a multiple of 8, else one.
__global__ void silu_mul_kernel(const bf16* gate_up, int64_t rows, int width, bf16* out) {
  allow_dependents();  // the down projection may start on its weights
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if (width % 8 == 0) {
    const int64_t groups = rows * (width / 8);
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < groups; i += stride) {
      const int64_t r = i / (width / 8), c = i % (width / 8);
      const Bf16x8 g = reinterpret_cast<const Bf16x8*>(gate_up + r * 2 * width)[c];
      const Bf16x8 u = reinterpret_cast<const Bf16x8*>(gate_up + r * 2 * width + width)[c];
      Bf16x8 o;
      for (int j = 0; j < 4; ++j) {
        const float2 gf = __bfloat1622float2(g.v[j]), uf = __bfloat1622float2(u.v[j]);
        o.v[j] = __floats2bfloat162_rn(silu_times(gf.x, uf.x), silu_times(gf.y, uf.y));
      }
      reinterpret_cast<Bf16x8*>(out + r * width)[c] = o;
    }
    return;
  }
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * width; i += stride) {
    const int64_t r = i / width, c = i % width;
    out[i] = __float2bfloat16_rn(silu_times(to_float(gate_up[r * 2 * width + c]), to_float(gate_up[r * 2 * width + width + c])));
  }
}

__global__ void argmax_kernel(const float* logits, int vocab, int32_t* out) {
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float best = -INFINITY;
  int index = INT32_MAX;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x)
    if (row[i] > best) best = row[i], index = i;  // NaN never wins
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, best, offset);
    const int other_index = __shfl_xor_sync(0xffffffffu, index, offset);
    if (other > best || (other == best && other_index < index)) best = other, index = other_index;
  }
  __shared__ float warp_best[32];
  __shared__ int warp_index[32];
  if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = best, warp_index[threadIdx.x / 32] = index;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w)
      if (warp_best[w] > best || (warp_best[w] == best && warp_index[w] < index)) best = warp_best[w], index = warp_index[w];
    out[blockIdx.x] = index == INT32_MAX ? 0 : index;  // an all-NaN row: token 0
  }
}

unsigned elementwise_blocks(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096)); }

}  // namespace

Status launch_gather_rows(const bf16* table, const int32_t* rows, int n, int width, bf16* out, cudaStream_t stream) {
  if (n == 0) return Status::ok();
  gather_rows_kernel<<<static_cast<unsigned>(n), 128, 0, stream>>>(table, rows, width, out);
  return cuda_status(cudaGetLastError(), "gather_rows_kernel");
}

Status launch_add_rms_norm(bf16* x, const bf16* delta, const bf16* weight, int rows, int width, float eps, bf16* out,
                           cudaStream_t stream) {
  if (rows == 0) return Status::ok();
  const int threads = width % 8 == 0 ? kRmsThreads : std::clamp((width + 31) / 32 * 32, 32, 1024);
  return launch_dependent("add_rms_norm_kernel", add_rms_norm_kernel, dim3(static_cast<unsigned>(rows)), dim3(threads),
                          0, stream, x, delta, weight, width, eps, out);
}

Status launch_add_bias(bf16* x, const bf16* bias, int rows, int width, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(rows) * width;
  if (n == 0) return Status::ok();
  add_bias_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(x, bias, n, width);
  return cuda_status(cudaGetLastError(), "add_bias_kernel");
}

Status launch_qkv_finish(const QkvArgs& a, cudaStream_t stream) {
  if (a.tokens == 0) return Status::ok();
  if (a.head_dim % 2 != 0 || a.head_dim > 2 * 32 * kMaxPairsPerLane)
    return invalid_argument("qkv_finish: head_dim must be even and at most 256");
  const int heads = a.heads + 2 * a.kv_heads;
  const dim3 grid(static_cast<unsigned>(a.tokens), static_cast<unsigned>((heads + kQkvWarps - 1) / kQkvWarps));
  return launch_dependent("qkv_finish_kernel", qkv_finish_kernel, grid, dim3(kQkvWarps * 32), 0, stream, a);
}

Status launch_silu_mul(const bf16* gate_up, int rows, int width, bf16* out, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(rows) * width;
  if (n == 0) return Status::ok();
  silu_mul_kernel<<<elementwise_blocks(width % 8 == 0 ? n / 8 : n), 256, 0, stream>>>(gate_up, rows, width, out);
  return cuda_status(cudaGetLastError(), "silu_mul_kernel");
}

Status launch_argmax(const float* logits, int rows, int vocab, int32_t* out, cudaStream_t stream) {
  if (rows == 0) return Status::ok();
  argmax_kernel<<<static_cast<unsigned>(rows), 1024, 0, stream>>>(logits, vocab, out);
  return cuda_status(cudaGetLastError(), "argmax_kernel");
}

}  // namespace hiq::cuda
