// The shapes a decode batch is computed at on the GPU, and the options that
// choose them (model/cuda_model_options.h), and a tensor-parallel model's
// placement. The graphs and the ranks themselves are tested on the GPU
// (gpu_model_test.cc, gpu_tp_model_test.cc).
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "model/cuda_model_options.h"

namespace hiq {
namespace {

TEST(CudaModelOptions, DecodeBatchesRoundUpToSGLangStyleBuckets) {
  const std::vector<std::pair<int, int>> expected = {{1, 1},   {2, 2},   {3, 4},   {4, 4},   {5, 8},     {8, 8},
                                                     {9, 16},  {16, 16}, {17, 24}, {33, 40}, {159, 160}, {160, 160}};
  for (const auto& [batch, bucket] : expected) EXPECT_EQ(decode_batch_bucket(batch, 160), bucket) << batch;
  EXPECT_EQ(decode_batch_bucket(161, 160), 0) << "above the cap: its own size, no graph";
  EXPECT_EQ(decode_batch_bucket(17, 20), 20) << "the cap is a bucket of its own";
  EXPECT_EQ(decode_batch_bucket(2, 1), 0);
  EXPECT_EQ(decode_batch_bucket(0, 160), 0);
}

TEST(CudaModelOptions, DecodeContextsRoundUpToPowersOfTwoFrom256) {
  EXPECT_EQ(decode_context_bucket(1), 256);
  EXPECT_EQ(decode_context_bucket(256), 256);
  EXPECT_EQ(decode_context_bucket(257), 512);
  EXPECT_EQ(decode_context_bucket(2049), 4096);
  EXPECT_EQ(decode_context_bucket(1 << 30), 1 << 30);
  EXPECT_EQ(decode_context_bucket((1 << 30) + 1), (1 << 30) + 1);
}

TEST(CudaModelOptions, ValidateNamesTheField) {
  EXPECT_TRUE(CudaModelOptions{}.validate().is_ok());
  CudaModelOptions o;
  o.cuda_graph_max_batch = 0;
  EXPECT_EQ(o.validate().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(o.validate().message().starts_with("cuda_graph_max_batch must be in [1, 1024]"))
      << o.validate().message();
  o.cuda_graph_max_batch = 1025;
  EXPECT_FALSE(o.validate().is_ok());
}

TEST(CudaTpOptions, PlacesRankROnGpuRUnlessToldAndNamesWhatIsWrong) {
  CudaTpOptions o;
  EXPECT_TRUE(o.validate(4).is_ok());
  EXPECT_EQ(o.device(3), 3);
  o.devices = {2, 3};
  EXPECT_TRUE(o.validate(2).is_ok());
  EXPECT_EQ(o.device(1), 3);
  const Status count = o.validate(4);
  EXPECT_EQ(count.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(count.message(), "devices list 2 GPUs for 4 ranks");
  o.devices = {0, -1};
  EXPECT_EQ(o.validate(2).message(), "devices give rank 1 a negative GPU");
  // One GPU for every rank: the peer collective's test setup, which NCCL refuses.
  o.devices = {0, 0};
  const Status shared = o.validate(2);
  EXPECT_EQ(shared.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(shared.message().starts_with("devices put ranks 0 and 1 on GPU 0")) << shared.message();
  o.collective = TpCollective::kPeer;
  EXPECT_TRUE(o.validate(2).is_ok());
  EXPECT_EQ(CudaTpOptions{}.validate(0).code(), StatusCode::kInvalidArgument);
  o.model.cuda_graph_max_batch = 0;
  EXPECT_TRUE(o.validate(2).message().starts_with("cuda_graph_max_batch")) << o.validate(2).message();
}

TEST(CudaTpOptions, CollectivesHaveNames) {
  for (TpCollective c : {TpCollective::kNccl, TpCollective::kPeer}) {
    auto parsed = parse_tp_collective(tp_collective_name(c));
    ASSERT_TRUE(parsed.is_ok());
    EXPECT_EQ(*parsed, c);
  }
  EXPECT_EQ(parse_tp_collective("mpi").status().message(),
            "tensor-parallel collective must be nccl or peer, got 'mpi'");
}

}  // namespace
}  // namespace hiq
