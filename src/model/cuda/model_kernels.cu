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

// q, k and v of each token finished: bias, q/k RMSNorm and RoPE, with k and v
// written to their L1 slots. Blocks of kQkvWarps warps, blockIdx.x the
// token; heads are numbered q, then k, then v. A head's RoPE pairs
// (j, j + d/2), j < d/2, are cut into `slots` of kVec consecutive j; a
// head takes `lanes` lanes of a warp (slots rounded up to a power of two,
// at most 32; the lanes past the slots hold none), so a warp finishes
// 32 / lanes heads side by side, and lane l of a head holds slots l,
// l + lanes, … With kVec = 8 (d a multiple of 16)
// each slot is two 16-byte accesses; at Qwen3's d = 128 a warp takes 4
// heads, and a head's 256 bytes are read in one go instead of as 64-byte
// pieces by a whole warp, which left the kernel at a third of the memory
// bandwidth. kVec = 1 serves every other even d up to 256.
// The token's rotation factors are the same for all its heads: a block
// computes them once, into shared memory (at 16K tokens a layer of Qwen3-8B
// would otherwise take 84 M precise sines and cosines for 2 M distinct ones).
constexpr int kQkvWarps = 4;
constexpr int kMaxPairs = 128;  // head_dim ≤ 256
static_assert(kQkvWarps * 32 >= kMaxPairs, "a thread per rotation pair");

struct QkvLanes {
  int lanes;  // lanes per head
  int heads;  // heads a warp takes side by side
};
template <int kVec>
QkvLanes qkv_lanes(int head_dim) {
  const int slots = head_dim / 2 / kVec;
  int lanes = 1;
  while (lanes < slots && lanes < 32) lanes *= 2;  // lanes past the slots hold none
  return {lanes, 32 / lanes};
}

// kVec consecutive BF16 values to or from floats: one 16-byte access for 8.
template <int kVec>
__device__ __forceinline__ void load_vec(const bf16* p, float (&out)[kVec]) {
  if constexpr (kVec == 8) {
    const Bf16x8 v = *reinterpret_cast<const Bf16x8*>(p);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 f = __bfloat1622float2(v.v[e]);
      out[2 * e] = f.x, out[2 * e + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int e = 0; e < kVec; ++e) out[e] = to_float(p[e]);
  }
}
template <int kVec>
__device__ __forceinline__ void store_vec(bf16* p, const float (&in)[kVec]) {
  if constexpr (kVec == 8) {
    Bf16x8 v;
#pragma unroll
    for (int e = 0; e < 4; ++e) v.v[e] = __floats2bfloat162_rn(in[2 * e], in[2 * e + 1]);
    *reinterpret_cast<Bf16x8*>(p) = v;
  } else {
#pragma unroll
    for (int e = 0; e < kVec; ++e) p[e] = __float2bfloat16_rn(in[e]);
  }
}

template <int kVec>
__global__ void __launch_bounds__(kQkvWarps * 32) qkv_finish_kernel(QkvArgs a, QkvLanes layout) {
  constexpr int kMaxSlots = kVec == 8 ? 1 : kMaxPairs / 32;  // slots a lane holds
  allow_dependents();        // the attention after it may be scheduled, and wait for it
  wait_for_prerequisites();  // a dependent launch: the product before wrote qkv
  const int t = blockIdx.x, warp = blockIdx.y * kQkvWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  const int d = a.head_dim, half = d / 2, all_heads = a.heads + 2 * a.kv_heads;
  bf16* row = a.qkv + static_cast<int64_t>(t) * all_heads * d;
  const bool store = a.slots[t] != kNoKvSlot;
  // cos and sin of pair j's angle, in BF16 and scaled, as the reference's bf16 tables hold them.
  __shared__ float rotation_cos[kMaxPairs], rotation_sin[kMaxPairs];
  if (static_cast<int>(threadIdx.x) < half) {
    const float theta = static_cast<float>(a.positions[t]) * a.inv_freq[threadIdx.x];
    rotation_cos[threadIdx.x] = round_to_bf16(cosf(theta) * a.rope_scale);
    rotation_sin[threadIdx.x] = round_to_bf16(sinf(theta) * a.rope_scale);
  }
  __syncthreads();

  const int in_head = lane % layout.lanes;  // this lane's first slot
  // Every lane of a warp runs the same iterations (the shuffles below take
  // them all); a lane past the last head holds zeros and stores nothing.
  for (int first = warp * layout.heads; first < all_heads; first += gridDim.y * kQkvWarps * layout.heads) {
    const int head = first + lane / layout.lanes;
    const bool valid = head < all_heads;
    bf16* x = row + head * d;
    const bf16* bias = a.bias != nullptr ? a.bias + head * d : nullptr;
    float lo[kMaxSlots][kVec], hi[kMaxSlots][kVec];
    float squares = 0.f;
#pragma unroll
    for (int p = 0; p < kMaxSlots; ++p) {
      const int j = (in_head + layout.lanes * p) * kVec;  // the slot's first pair
      if (!valid || j >= half) continue;
      load_vec<kVec>(x + j, lo[p]);
      load_vec<kVec>(x + j + half, hi[p]);
      if (bias != nullptr) {
        float bias_lo[kVec], bias_hi[kVec];
        load_vec<kVec>(bias + j, bias_lo);
        load_vec<kVec>(bias + j + half, bias_hi);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          lo[p][e] = round_to_bf16(lo[p][e] + bias_lo[e]);
          hi[p][e] = round_to_bf16(hi[p][e] + bias_hi[e]);
        }
      }
#pragma unroll
      for (int e = 0; e < kVec; ++e) squares += lo[p][e] * lo[p][e] + hi[p][e] * hi[p][e];
    }
    // The head's sum of squares over its lanes, an aligned group of the warp.
    for (int offset = layout.lanes / 2; offset > 0; offset /= 2)
      squares += __shfl_xor_sync(0xffffffffu, squares, offset);
    const bool is_q = head < a.heads, is_k = !is_q && head < a.heads + a.kv_heads;
    if (!valid || (!is_q && !store)) continue;
    bf16* dst = is_q   ? x
                : is_k ? a.k_plane + static_cast<int64_t>(a.slots[t]) * a.kv_heads * d + (head - a.heads) * d
                       : a.v_plane + static_cast<int64_t>(a.slots[t]) * a.kv_heads * d +
                             (head - a.heads - a.kv_heads) * d;
    const bf16* norm = is_q ? a.q_norm : is_k ? a.k_norm : nullptr;
    const float rstd = rsqrtf(squares / static_cast<float>(d) + a.eps);
#pragma unroll
    for (int p = 0; p < kMaxSlots; ++p) {
      const int j = (in_head + layout.lanes * p) * kVec;
      if (j >= half) continue;
      if (!is_q && !is_k) {  // v: straight into L1
        store_vec<kVec>(dst + j, lo[p]);
        store_vec<kVec>(dst + j + half, hi[p]);
        continue;
      }
      if (norm != nullptr) {
        float weight_lo[kVec], weight_hi[kVec];
        load_vec<kVec>(norm + j, weight_lo);
        load_vec<kVec>(norm + j + half, weight_hi);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          lo[p][e] = round_to_bf16(round_to_bf16(lo[p][e] * rstd) * weight_lo[e]);
          hi[p][e] = round_to_bf16(round_to_bf16(hi[p][e] * rstd) * weight_hi[e]);
        }
      }
      // x·cos + rotate_half(x)·sin, each product and sum rounded, as the
      // reference computes it in bf16.
      float new_lo[kVec], new_hi[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const float c = rotation_cos[j + e], s = rotation_sin[j + e];
        new_lo[e] = round_to_bf16(lo[p][e] * c) + round_to_bf16(-hi[p][e] * s);
        new_hi[e] = round_to_bf16(hi[p][e] * c) + round_to_bf16(lo[p][e] * s);
      }
      store_vec<kVec>(dst + j, new_lo);
      store_vec<kVec>(dst + j + half, new_hi);
    }
  }
}

// Eight outputs per thread when the width is a multiple of 8 and the rows
// 16-byte aligned, else one:
// blockIdx.x picks the columns, blockIdx.y the first row, and the block steps
// down the rows gridDim.y at a time (no index division per element).
constexpr int kSiluThreads = 256;
__global__ void silu_mul_kernel(const bf16* gate_up, int rows, int width, bf16* out, int vector) {
  allow_dependents();  // the down projection may start on its weights
  const int c = blockIdx.x * kSiluThreads + threadIdx.x;
  if (c >= width / vector) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const bf16* gate = gate_up + r * 2 * width;
    const bf16* up = gate + width;
    if (vector == 8) {
      const Bf16x8 g = reinterpret_cast<const Bf16x8*>(gate)[c];
      const Bf16x8 u = reinterpret_cast<const Bf16x8*>(up)[c];
      Bf16x8 o;
      for (int j = 0; j < 4; ++j) {
        const float2 gf = __bfloat1622float2(g.v[j]), uf = __bfloat1622float2(u.v[j]);
        o.v[j] = __floats2bfloat162_rn(silu_times(gf.x, uf.x), silu_times(gf.y, uf.y));
      }
      reinterpret_cast<Bf16x8*>(out + r * width)[c] = o;
    } else {
      out[r * width + c] = __float2bfloat16_rn(silu_times(to_float(gate[c]), to_float(up[c])));
    }
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
  if (a.head_dim % 2 != 0 || a.head_dim > 2 * kMaxPairs)
    return invalid_argument("qkv_finish: head_dim must be even and at most 256");
  const bool vector = a.head_dim % 16 == 0 && aligned16(a.qkv) && aligned16(a.bias) && aligned16(a.q_norm) &&
                      aligned16(a.k_norm) && aligned16(a.k_plane) && aligned16(a.v_plane);
  const QkvLanes layout = vector ? qkv_lanes<8>(a.head_dim) : qkv_lanes<1>(a.head_dim);
  const int heads = a.heads + 2 * a.kv_heads, heads_per_block = kQkvWarps * layout.heads;
  const dim3 grid(static_cast<unsigned>(a.tokens), static_cast<unsigned>((heads + heads_per_block - 1) / heads_per_block));
  return vector ? launch_dependent("qkv_finish_kernel", qkv_finish_kernel<8>, grid, dim3(kQkvWarps * 32), 0, stream, a,
                                   layout)
                : launch_dependent("qkv_finish_kernel", qkv_finish_kernel<1>, grid, dim3(kQkvWarps * 32), 0, stream, a,
                                   layout);
}

Status launch_silu_mul(const bf16* gate_up, int rows, int width, bf16* out, cudaStream_t stream) {
  if (rows == 0 || width == 0) return Status::ok();
  const int vector = width % 8 == 0 && aligned16(gate_up) && aligned16(out) ? 8 : 1;
  const int columns = width / vector;
  // Enough blocks for every multiprocessor many times over, each taking several rows.
  const dim3 grid(static_cast<unsigned>((columns + kSiluThreads - 1) / kSiluThreads),
                  static_cast<unsigned>(std::min(rows, 4096)));
  silu_mul_kernel<<<grid, kSiluThreads, 0, stream>>>(gate_up, rows, width, out, vector);
  return cuda_status(cudaGetLastError(), "silu_mul_kernel");
}

Status launch_argmax(const float* logits, int rows, int vocab, int32_t* out, cudaStream_t stream) {
  if (rows == 0) return Status::ok();
  argmax_kernel<<<static_cast<unsigned>(rows), 1024, 0, stream>>>(logits, vocab, out);
  return cuda_status(cudaGetLastError(), "argmax_kernel");
}

}  // namespace hiq::cuda
