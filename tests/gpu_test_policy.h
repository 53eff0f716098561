// tests/gpu_test_policy.h — when a GPU test may skip, and when it must fail.
//
// A GPU test skips only where there is nothing to test: the build has no CUDA
// backend, no CUDA driver is loaded, or the driver sees no device — what
// cuda::query_gpus() reports as kUnavailable. Any other failure of the query
// (a driver older than the runtime, a device busy, lost or failing) means a
// broken GPU machine, and the test fails. HIQ_REQUIRE_GPU=1 (set by
// scripts/gpu-check) turns every skip into a failure, so a GPU run cannot
// report "ok" with nothing run. This header is the one place the tests read it.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <string_view>

#include "core/status.h"
#include "cuda/device.h"

namespace hiq::test {

enum class GpuTestAction { kRun, kSkip, kFail };

struct GpuTestDecision {
  GpuTestAction action = GpuTestAction::kRun;
  std::string reason;  // why it skips or fails; empty when it runs
};

// The policy: `query` is the status of cuda::query_gpus(), `gpu_required` the
// value of HIQ_REQUIRE_GPU.
inline GpuTestDecision decide_gpu_test(const Status& query, bool gpu_required) {
  if (query.is_ok()) return {};
  if (query.code() != StatusCode::kUnavailable)
    return {GpuTestAction::kFail, "the GPU query failed (a broken GPU machine, not a missing GPU): " + query.to_string()};
  if (gpu_required) return {GpuTestAction::kFail, "HIQ_REQUIRE_GPU is set but no GPU is usable: " + query.message()};
  return {GpuTestAction::kSkip, query.message()};
}

// HIQ_REQUIRE_GPU's value: set and neither empty nor "0".
inline bool parse_require_gpu(const char* value) {
  return value != nullptr && std::string_view(value) != "" && std::string_view(value) != "0";
}

inline bool gpu_required_by_environment() {
  static const bool required = parse_require_gpu(std::getenv("HIQ_REQUIRE_GPU"));
  return required;
}

// The decision for a GPU test in this process.
inline GpuTestDecision gpu_test_decision() {
  const auto gpus = cuda::query_gpus();
  return decide_gpu_test(gpus.status(), gpu_required_by_environment());
}

}  // namespace hiq::test

// In a GPU test's SetUp or body: returns from it, skipped or failed, unless a
// GPU is usable (see the policy above).
#define HIQ_SKIP_OR_FAIL_WITHOUT_GPU()                                                         \
  do {                                                                                         \
    const ::hiq::test::GpuTestDecision hiq_gpu_decision = ::hiq::test::gpu_test_decision();    \
    if (hiq_gpu_decision.action == ::hiq::test::GpuTestAction::kFail)                          \
      GTEST_FAIL() << hiq_gpu_decision.reason;                                                 \
    if (hiq_gpu_decision.action == ::hiq::test::GpuTestAction::kSkip)                          \
      GTEST_SKIP() << hiq_gpu_decision.reason;                                                 \
  } while (0)
