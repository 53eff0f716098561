// tests/tensor_parallel_test_util.h — the per-rank L1 pools of the
// tensor-parallel tests: one pool per rank, of the rank's KV geometry, all
// addressed by the same slots.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "kv/geometry.h"
#include "kv/model_config.h"
#include "memory/device_kv_pool.h"
#include "model/cpu_forward.h"

namespace hiq::testing {

// One rank's KV geometry of `shape` over `size` ranks: its share of the KV
// heads (replicated past their count), as `hiq layout --tp` computes it.
inline KvGeometry rank_geometry(const ModelShape& shape, int size) {
  GeometryOptions o;
  o.tp_size = size;
  auto g = mha_kv_geometry("tiny", shape.num_layers, shape.num_kv_heads, shape.head_dim, o);
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return *g;
}

struct RankPools {
  std::vector<std::unique_ptr<DeviceKvPool>> owned;
  std::vector<DeviceKvPool*> pools;
};

inline RankPools rank_pools(const ModelShape& shape, int size, size_t slots) {
  RankPools p;
  for (int r = 0; r < size; ++r) {
    auto pool = make_host_memory_device_pool(rank_geometry(shape, size), slots);
    EXPECT_TRUE(pool.is_ok()) << pool.status().to_string();
    p.pools.push_back(pool->get());
    p.owned.push_back(std::move(*pool));
  }
  return p;
}

}  // namespace hiq::testing
