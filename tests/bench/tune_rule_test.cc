// bench tune's rule on synthetic sweeps: the setting whose worse direction is closest to the
// best; near-ties to the fewest bytes in flight; and the buffer count.
#include <gtest/gtest.h>

#include "bench/tune_rule.h"
#include "tests/bench/sweep_table_util.h"

namespace strata::bench {
namespace {

using testing::FakeTable;

TEST(PickSetting, TakesTheBestBalanceNotTheBestOfOneDirection) {
  // 8M qd 64 reads best, 128K qd 4 writes best; 1M qd 16 is within 3% of both.
  const SweepTable t = FakeTable({{8 << 20, 64, 4.0, 2.0, 3.0, 2.2},
                                  {128 << 10, 4, 2.0, 3.0, 1.0, 3.3},
                                  {1 << 20, 16, 3.9, 2.92, 2.5, 2.8}});
  auto p = PickSetting(t);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->block, 1u << 20);
  EXPECT_EQ(p->queue_depth, 16u);
  EXPECT_DOUBLE_EQ(p->best_read, 4.0);
  EXPECT_DOUBLE_EQ(p->best_write, 3.0);
  EXPECT_NEAR(p->score, 2.92 / 3.0, 1e-12);
  EXPECT_DOUBLE_EQ(p->fio_best_read, 3.0);
  EXPECT_DOUBLE_EQ(p->fio_best_write, 3.3);
}

TEST(PickSetting, NearTiesGoToFewerBytesInFlight) {
  // Both at the best in both directions within 0.5%: 1M x 8 = 8 MiB in flight beats 4M x 16.
  const SweepTable t = FakeTable({{4 << 20, 16, 3.0, 2.0}, {1 << 20, 8, 2.99, 1.995}, {128 << 10, 1, 1.0, 0.5}});
  auto p = PickSetting(t);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->block, 1u << 20);
  EXPECT_EQ(p->queue_depth, 8u);
  // With no tolerance the strictly higher score wins.
  auto strict = PickSetting(t, /*tie=*/0);
  ASSERT_TRUE(strict.ok());
  EXPECT_EQ(strict->block, 4u << 20);
}

TEST(PickSetting, SkipsSettingsMissingADirectionAndFailsOnNone) {
  SweepTable t = FakeTable({{1 << 20, 4, 2.0, 2.0}, {2 << 20, 4, 3.0, 3.0}});
  t.rows.erase(t.rows.begin() + 2);  // 2M qd 4 loses its write
  auto p = PickSetting(t);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->block, 1u << 20);
  EXPECT_EQ(PickSetting(SweepTable{}).status().code(), StatusCode::kNotFound);
}

TEST(ParamBufferCount, FillsTheQueueWithinThePrefetchBudget) {
  constexpr uint64_t MiB = 1 << 20;
  // 32 x 1 MiB in flight with 8 MiB buffers: 4 tensors, budget allows 10 -> 4 + 2.
  EXPECT_EQ(ParamBufferCount(1 << 20, 32, 8 * MiB, 80 * MiB), 6);
  // The prefetch budget allows 2 -> 2 + 2.
  EXPECT_EQ(ParamBufferCount(1 << 20, 32, 8 * MiB, 16 * MiB), 4);
  // One request's worth: at least 3 (the engine's minimum).
  EXPECT_EQ(ParamBufferCount(128 << 10, 1, 64 * MiB, 1), 3);
  // Never above the config's limit.
  EXPECT_EQ(ParamBufferCount(8 << 20, 4096, 4096, uint64_t{1} << 40), 1024);
}

}  // namespace
}  // namespace strata::bench
