// model/cuda/bench_util.h (internal to the CUDA model) — what the kernel
// benchmarks (`hiq bench attention`, `hiq bench gemm`) share: random device
// inputs, a median time by CUDA events, results back as floats; and what
// `hiq bench model` needs besides (prompts, slot ranges).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "core/status.h"
#include "cuda/buffers.h"

namespace hiq::cuda {

// n BF16 values drawn from N(0, stddev²) (seeded), in fresh device memory.
Result<DeviceMemory> random_device_bf16(size_t n, uint32_t seed, float stddev, const char* what);

// The median seconds of one call of `call(i)`, i = 0 … per_batch − 1 timed
// together by CUDA events on `stream`, over at least 5 and at most 200
// batches or about `budget` seconds, after one untimed batch: the rule of
// core/median_time.h in device time, for kernels of microseconds that a
// host clock around a synchronisation would not resolve.
Result<double> median_event_seconds(const std::function<Status(int)>& call, int per_batch, double budget,
                              cudaStream_t stream);

// n token ids drawn uniformly from [0, vocab) (seeded): a benchmark's prompt.
std::vector<int32_t> random_prompt(size_t n, int vocab, uint32_t seed);
// The L1 slots first, first + 1, …, first + n − 1.
std::vector<uint32_t> slot_range(size_t n, size_t first);

// ‖a − b‖ / ‖b‖ (‖a − b‖ when b is all zeros).
double relative_error(const std::vector<float>& a, const std::vector<float>& b);

// n values of device memory, BF16 or FP32, as floats.
Result<std::vector<float>> download_floats(const void* device, size_t n, bool fp32);

}  // namespace hiq::cuda
