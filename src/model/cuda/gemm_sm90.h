// model/cuda/gemm_sm90.h (internal to the CUDA model) — a prefill product
// y = epilogue(x[m][k] · w[n][k]ᵀ) on Hopper's warpgroup tensor-core
// instructions (wgmma, sm_90a), with the layer's next step in its epilogue.
//
// A prefill layer's products run on cuBLAS at its speed, but between them sit
// steps that read and write whole activations: the SiLU gate (the gate|up
// product's 2·I columns in, I out) and the residual adds before each norm.
// On the H200 they took about 28 of a 16K-token prefill's 514 ms, and
// cuBLASLt has no epilogue for either (docs/benchmarks.md). This kernel applies them to
// its accumulators before it stores, with the bits of the kernels they
// replace (layer_steps.cuh):
//   - kStore:    y = bf16(x·wᵀ)
//   - kAddToY:   y = bf16(y + bf16(x·wᵀ)), launch_add_rms_norm's add (the
//                norm that follows then runs on y alone);
//   - kSiluGate: w has 2n rows, the gate projection's n then the up
//                projection's n; y[m][n] = bf16(silu(bf16(x·gateᵀ)) ·
//                bf16(x·upᵀ)), launch_silu_mul's function.
// For the same x and w the three give the same products: the epilogue forms
// are the bits of kStore followed by the separate kernel.
//
// Design. A persistent grid, a block per multiprocessor, walks the output
// tiles of 128 rows × 256 product columns (for kSiluGate 128 gate and the
// same 128 up columns, one tile of 128 outputs), grouped 16 row tiles at a
// time so that the blocks running together share their operands in L2. A
// block's first warpgroup is the producer: one thread moves x's and w's
// 64-wide slices of k into a four-stage ring with the bulk tensor copy
// engine (128-byte swizzled; an mbarrier each way per stage), running ahead
// into the next tile while the other two warpgroups — each 64 rows of the
// tile — multiply (m64n256k16, both operands from shared memory, FP32
// accumulators in registers), then apply the epilogue and store.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "core/status.h"

namespace hiq::cuda {

enum class Sm90Epilogue { kStore, kAddToY, kSiluGate };

// Whether the kernel takes the product: a device of compute capability 9.0,
// m ≥ 1, k a positive multiple of 64, n a multiple of 256 (kSiluGate: of
// 128), x, w and y 16-byte aligned.
bool gemm_sm90_supports(const void* x, int m, const void* w, int n, int k, const void* y, Sm90Epilogue epilogue);

Status launch_gemm_sm90(const __nv_bfloat16* x, int m, const __nv_bfloat16* w, int n, int k, __nv_bfloat16* y,
                        Sm90Epilogue epilogue, cudaStream_t stream);

}  // namespace hiq::cuda
