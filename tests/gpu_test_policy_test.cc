// The GPU tests' skip policy (gpu_test_policy.h), on host: a missing GPU
// skips, a failed query fails, and HIQ_REQUIRE_GPU turns every skip into a
// failure. tests/gpu_skip_policy_test.sh runs the GPU binary itself both ways.
#include "gpu_test_policy.h"

#include <gtest/gtest.h>

namespace hiq::test {
namespace {

TEST(GpuTestPolicy, RunsWhenTheQueryFindsAGpu) {
  EXPECT_EQ(decide_gpu_test(Status::ok(), false).action, GpuTestAction::kRun);
  EXPECT_EQ(decide_gpu_test(Status::ok(), true).action, GpuTestAction::kRun);
}

TEST(GpuTestPolicy, SkipsWithoutAGpuUnlessOneIsRequired) {
  const Status none = unavailable("no usable CUDA device: none found");
  const GpuTestDecision skip = decide_gpu_test(none, false);
  EXPECT_EQ(skip.action, GpuTestAction::kSkip);
  EXPECT_NE(skip.reason.find("none found"), std::string::npos) << skip.reason;
  const GpuTestDecision fail = decide_gpu_test(none, true);
  EXPECT_EQ(fail.action, GpuTestAction::kFail);
  EXPECT_NE(fail.reason.find("HIQ_REQUIRE_GPU"), std::string::npos) << fail.reason;
}

TEST(GpuTestPolicy, FailsWhenTheDeviceQueryFailsRequiredOrNot) {
  const Status broken = internal_error("cudaGetDeviceCount failed: cudaErrorInsufficientDriver");
  for (const bool required : {false, true}) {
    const GpuTestDecision d = decide_gpu_test(broken, required);
    EXPECT_EQ(d.action, GpuTestAction::kFail);
    EXPECT_NE(d.reason.find("cudaErrorInsufficientDriver"), std::string::npos) << d.reason;
  }
}

TEST(GpuTestPolicy, RequireGpuIsSetByAnyValueButEmptyOrZero) {
  EXPECT_FALSE(parse_require_gpu(nullptr));
  EXPECT_FALSE(parse_require_gpu(""));
  EXPECT_FALSE(parse_require_gpu("0"));
  EXPECT_TRUE(parse_require_gpu("1"));
  EXPECT_TRUE(parse_require_gpu("yes"));
}

// Whatever this machine has, the query answers with a GPU or with a reason the
// policy can judge; without the CUDA backend that reason is kUnavailable.
TEST(GpuTestPolicy, TheBuildWithoutCudaSkipsRatherThanFails) {
  if (cuda::backend_built()) GTEST_SKIP() << "this build has the CUDA backend: gpu_skip_policy covers it";
  const auto gpus = cuda::query_gpus();
  ASSERT_FALSE(gpus.is_ok());
  EXPECT_EQ(decide_gpu_test(gpus.status(), false).action, GpuTestAction::kSkip);
  EXPECT_EQ(decide_gpu_test(gpus.status(), true).action, GpuTestAction::kFail);
}

}  // namespace
}  // namespace hiq::test
