// Prefill products with the layer's next step in their epilogue, on Hopper's
// warpgroup tensor-core instructions: gemm_sm90.h says what and how.
//
// Built only for sm_90a (with attention_sm90.cu, src/CMakeLists.txt); on any
// other device code path the kernel body is empty, and gemm_sm90_supports()
// refuses every device but compute capability 9.0.
#include "model/cuda/gemm_sm90.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "cuda/check.cuh"
#include "cuda/kernel_attributes.cuh"
#include "model/cuda/attention_device.cuh"
#include "model/cuda/layer_steps.cuh"
#include "model/cuda/sm90.cuh"

namespace hiq::cuda {
namespace {

using attention_device::smem_address;
using namespace sm90;

constexpr int kTileRows = 128;  // rows of x per tile: 64 per consumer warpgroup
constexpr int kTileCols = 256;  // product columns (rows of w) per tile
constexpr int kSlice = 64;      // k per stage: one 128-byte swizzled row
constexpr int kStages = 4;
constexpr int kThreads = 384;   // the producer warpgroup, then two consumers
constexpr int kGroupRows = 16;  // row tiles walked together (L2 reuse)
constexpr int kXBytes = kTileRows * kSlice * 2;            // 16 KB
constexpr int kWBoxRows = kTileCols / 2;                   // w comes in two boxes of 128 rows
constexpr int kWBoxBytes = kWBoxRows * kSlice * 2;         // 16 KB
constexpr int kStageBytes = kXBytes + 2 * kWBoxBytes;      // 48 KB
// The stages, two barriers per stage (full, empty), room to align to 1 KB.
constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStages * 8 + 1024;

__host__ __device__ constexpr int out_cols(Sm90Epilogue e) { return e == Sm90Epilogue::kSiluGate ? kTileCols / 2 : kTileCols; }

struct GemmArgs {
  __nv_bfloat16* y;
  int m, n, k;  // n: y's columns (kSiluGate: the gate's rows of w)
};

// Which output tile the block's i-th turn takes: row tiles in groups of
// kGroupRows, the rows of a group before its next column, so the blocks
// running at once read a few of x's row tiles and of w's column tiles.
struct Tile {
  int row, col;
};
__device__ __forceinline__ Tile tile_at(int tile, int row_tiles, int col_tiles) {
  const int group = tile / (kGroupRows * col_tiles);
  const int first_row = group * kGroupRows;
  const int rows_in_group = min(kGroupRows, row_tiles - first_row);
  const int local = tile - group * kGroupRows * col_tiles;
  return {first_row + local % rows_in_group, local / rows_in_group};
}

#ifdef HIQ_SM90A_DEVICE
#define HIQ_ACC8(d, i) \
  "+f"(d[i + 0]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define HIQ_ACC64(d, i)                                                                                            \
  HIQ_ACC8(d, i), HIQ_ACC8(d, i + 8), HIQ_ACC8(d, i + 16), HIQ_ACC8(d, i + 24), HIQ_ACC8(d, i + 32), \
      HIQ_ACC8(d, i + 40), HIQ_ACC8(d, i + 48), HIQ_ACC8(d, i + 56)
#define HIQ_REGS128 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

// d (+)= A·B, m64n256k16, A and B from shared memory, both K-major.
__device__ __forceinline__ void wgmma_m64n256(float (&d)[128], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" HIQ_REGS128 "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : HIQ_ACC64(d, 0), HIQ_ACC64(d, 64)
      : "l"(a), "l"(b), "r"(accumulate));
}
#undef HIQ_ACC8
#undef HIQ_ACC64
#undef HIQ_REGS128

// The accumulators of a consumer thread: for each 8-column group j of the
// tile's 256, columns 8j + 2·(lane mod 4) + {0, 1} of two rows, lane/4 and
// lane/4 + 8 of its warp's 16, at d[4j + 2h + {0, 1}] for row h.
template <Sm90Epilogue kEpilogue>
__device__ __forceinline__ void store_tile(const float (&d)[128], const GemmArgs& g, const Tile& t, int first_row,
                                           int lane) {
  constexpr int kOut = out_cols(kEpilogue);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = first_row + 8 * h;
    if (row >= g.m) continue;
    __nv_bfloat16* out = g.y + static_cast<int64_t>(row) * g.n + t.col * kOut + 2 * (lane % 4);
    if constexpr (kEpilogue == Sm90Epilogue::kSiluGate) {
      // The gate's column c is the tile's column c, its up column c + 128.
#pragma unroll
      for (int j = 0; j < kTileCols / 16; ++j) {
        const int gate = 4 * j + 2 * h, up = 4 * (j + kTileCols / 16) + 2 * h;
        *reinterpret_cast<__nv_bfloat162*>(out + 8 * j) = __floats2bfloat162_rn(
            silu_times(round_to_bf16(d[gate]), round_to_bf16(d[up])),
            silu_times(round_to_bf16(d[gate + 1]), round_to_bf16(d[up + 1])));
      }
    } else {
      // kAddToY reads y a batch ahead of its stores: a load after a store
      // to the same array would wait for it (they might alias).
      constexpr int kBatch = 16;
#pragma unroll
      for (int j0 = 0; j0 < kTileCols / 8; j0 += kBatch) {
        __nv_bfloat162 old[kBatch];
        if constexpr (kEpilogue == Sm90Epilogue::kAddToY) {
#pragma unroll
          for (int b = 0; b < kBatch; ++b) old[b] = *reinterpret_cast<const __nv_bfloat162*>(out + 8 * (j0 + b));
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const int j = j0 + b;
          __nv_bfloat162 v = __floats2bfloat162_rn(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
          if constexpr (kEpilogue == Sm90Epilogue::kAddToY)
            v = __floats2bfloat162_rn(__low2float(old[b]) + __low2float(v), __high2float(old[b]) + __high2float(v));
          *reinterpret_cast<__nv_bfloat162*>(out + 8 * j) = v;
        }
      }
    }
  }
}
#endif

template <Sm90Epilogue kEpilogue>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_sm90_kernel(GemmArgs g, const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap w_map) {
#ifdef HIQ_SM90A_DEVICE
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t base = (smem_address(smem_raw) + 1023) & ~1023u;  // the swizzle needs 1 KB alignment
  const uint32_t full = base + kStages * kStageBytes, empty = full + kStages * 8;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(full + 8 * s, 1);                  // the producer's arrival, then the copies' bytes
      mbarrier_init(empty + 8 * s, kThreads - 128);    // every consumer thread
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  const int row_tiles = (g.m + kTileRows - 1) / kTileRows, col_tiles = g.n / out_cols(kEpilogue);
  const int tiles = row_tiles * col_tiles, slices = g.k / kSlice;
  const int warpgroup = threadIdx.x / 128;
  // Turn i of the ring (counted over the block's tiles) uses stage i mod
  // kStages, in that stage's (i / kStages)-th phase.
  const auto stage_of = [](int i) { return static_cast<uint32_t>(i % kStages); };
  const auto phase_of = [](int i) { return static_cast<uint32_t>((i / kStages) & 1); };

  if (warpgroup == 0) {
    // The producer: one thread issues every copy. (No register hand-over
    // between the warpgroups: at 168 a thread, a consumer's 128
    // accumulators and its addresses fit without spilling.)
    if (threadIdx.x != 0) return;
    int turn = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const Tile t = tile_at(tile, row_tiles, col_tiles);
      // w's two boxes: the tile's 256 rows, or the gate's 128 and the up projection's 128.
      const int w_row0 = t.col * out_cols(kEpilogue);
      const int w_row1 = kEpilogue == Sm90Epilogue::kSiluGate ? g.n + w_row0 : w_row0 + kWBoxRows;
      for (int s = 0; s < slices; ++s, ++turn) {
        const uint32_t stage = stage_of(turn), bar = full + 8 * stage, dst = base + stage * kStageBytes;
        mbarrier_wait(empty + 8 * stage, phase_of(turn) ^ 1);
        mbarrier_expect_bytes(bar, kStageBytes);  // rows past m come as zeros, and count
        bulk_copy_2d(dst, x_map, s * kSlice, t.row * kTileRows, bar);
        bulk_copy_2d(dst + kXBytes, w_map, s * kSlice, w_row0, bar);
        bulk_copy_2d(dst + kXBytes + kWBoxBytes, w_map, s * kSlice, w_row1, bar);
      }
    }
    return;
  }

  const int consumer = warpgroup - 1, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.f;
  int turn = 0;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const Tile t = tile_at(tile, row_tiles, col_tiles);
    for (int s = 0; s < slices; ++s, ++turn) {
      const uint32_t stage = stage_of(turn), x_tile = base + stage * kStageBytes;
      mbarrier_wait(full + 8 * stage, phase_of(turn));
      // This warpgroup's 64 rows of x, and w's 256; a step of 16 in k is 32
      // bytes into the swizzled rows (2 in the descriptor's address field).
      const uint64_t a = descriptor(x_tile + consumer * 64 * 128, 16, 1024);
      const uint64_t b = descriptor(x_tile + kXBytes, 16, 1024);
      fence_registers(d);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kSlice / 16; ++kk) wgmma_m64n256(d, a + 2 * kk, b + 2 * kk, s > 0 || kk > 0);
      wgmma_commit();
      // The slice before this one is multiplied: its stage may be refilled.
      wgmma_wait<1>();
      fence_registers(d);
      if (s > 0) mbarrier_arrive(empty + 8 * stage_of(turn - 1));
    }
    wgmma_wait_all();
    fence_registers(d);
    mbarrier_arrive(empty + 8 * stage_of(turn - 1));
    store_tile<kEpilogue>(d, g, t, t.row * kTileRows + consumer * 64 + warp * 16 + lane / 4, lane);
  }
#endif
}

// The tensor map of a row-major BF16 matrix of `rows` × k: boxes of kSlice
// elements × 128 rows, 128-byte swizzled; rows past the end read as zeros.
Result<CUtensorMap> matrix_map(const void* matrix, int rows, int k) {
  HIQ_ASSIGN_OR_RETURN(const EncodeTiled encode, encode_tiled());
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * 2};  // bytes, dimension 1
  const cuuint32_t box[2] = {kSlice, kWBoxRows}, element_strides[2] = {1, 1};
  static_assert(kWBoxRows == kTileRows, "x and w share one box shape");
  CUtensorMap map{};
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(matrix), dims, strides, box,
                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return internal_error("gemm_sm90: cuTensorMapEncodeTiled failed (" + std::to_string(r) + ")");
  return map;
}

// The device's multiprocessors, if it is of compute capability 9.0; else 0.
// Asked once per device (the model asks before each of a pass's products);
// a failed query is not remembered.
int hopper_multiprocessors() {
  static std::atomic<int> known[64] = {};  // device d: its answer + 1; 0 while not asked
  int device = 0, major = 0, minor = 0, count = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  const bool cached = device >= 0 && device < 64;
  if (cached) {
    if (const int answer = known[device].load(std::memory_order_relaxed); answer > 0) return answer - 1;
  }
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return 0;
  const int answer = major == 9 && minor == 0 ? count : 0;
  if (cached) known[device].store(answer + 1, std::memory_order_relaxed);
  return answer;
}

template <Sm90Epilogue kEpilogue>
Status launch(const GemmArgs& g, const CUtensorMap& x_map, const CUtensorMap& w_map, int multiprocessors,
              cudaStream_t stream) {
  HIQ_RETURN_IF_ERROR(allow_dynamic_shared_memory<gemm_sm90_kernel<kEpilogue>>(kSmemBytes));
  const int64_t tiles = static_cast<int64_t>((g.m + kTileRows - 1) / kTileRows) * (g.n / out_cols(kEpilogue));
  const auto grid = static_cast<unsigned>(std::min<int64_t>(tiles, multiprocessors));
  gemm_sm90_kernel<kEpilogue><<<grid, kThreads, kSmemBytes, stream>>>(g, x_map, w_map);
  return cuda_status(cudaGetLastError(), "gemm_sm90_kernel");
}

}  // namespace

bool gemm_sm90_supports(const void* x, int m, const void* w, int n, int k, const void* y, Sm90Epilogue epilogue) {
  return m >= 1 && k >= kSlice && k % kSlice == 0 && n >= 1 && n % out_cols(epilogue) == 0 && x != nullptr &&
         w != nullptr && y != nullptr && aligned16(x) && aligned16(w) && aligned16(y) &&
         hopper_multiprocessors() > 0;
}

Status launch_gemm_sm90(const __nv_bfloat16* x, int m, const __nv_bfloat16* w, int n, int k, __nv_bfloat16* y,
                        Sm90Epilogue epilogue, cudaStream_t stream) {
  if (!gemm_sm90_supports(x, m, w, n, k, y, epilogue))
    return invalid_argument("gemm_sm90: needs compute capability 9.0, k a multiple of 64, n of " +
                            std::to_string(out_cols(epilogue)) + ", 16-byte aligned operands");
  const int multiprocessors = hopper_multiprocessors();
  const int w_rows = epilogue == Sm90Epilogue::kSiluGate ? 2 * n : n;
  HIQ_ASSIGN_OR_RETURN(const CUtensorMap x_map, matrix_map(x, m, k));
  HIQ_ASSIGN_OR_RETURN(const CUtensorMap w_map, matrix_map(w, w_rows, k));
  const GemmArgs g{y, m, n, k};
  switch (epilogue) {
    case Sm90Epilogue::kStore:
      return launch<Sm90Epilogue::kStore>(g, x_map, w_map, multiprocessors, stream);
    case Sm90Epilogue::kAddToY:
      return launch<Sm90Epilogue::kAddToY>(g, x_map, w_map, multiprocessors, stream);
    case Sm90Epilogue::kSiluGate:
      return launch<Sm90Epilogue::kSiluGate>(g, x_map, w_map, multiprocessors, stream);
  }
  return invalid_argument("gemm_sm90: unknown epilogue");
}

}  // namespace hiq::cuda
