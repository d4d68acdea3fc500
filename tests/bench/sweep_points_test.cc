// Which settings a sweep re-measures and how long its passes are, on synthetic tables.
#include <gtest/gtest.h>

#include "bench/sweep_points.h"
#include "tests/bench/sweep_table_util.h"

namespace strata::bench {
namespace {

using testing::FakeTable;

TEST(SweepPassBytes, AtLeastFourTimesWhatIsInFlightInWholeTensors) {
  constexpr uint64_t MiB = 1 << 20;
  EXPECT_EQ(SweepPassBytes(256 * MiB, 16 * MiB, {1 << 20, 16}), 256 * MiB);      // 16 MiB in flight
  EXPECT_EQ(SweepPassBytes(256 * MiB, 16 * MiB, {8 << 20, 64}), 2048 * MiB);     // 512 MiB in flight
  EXPECT_EQ(SweepPassBytes(256 * MiB, 16 * MiB, {2 << 20, 64}), 512 * MiB);
  EXPECT_EQ(SweepPassBytes(100 * MiB, 16 * MiB, {128 << 10, 1}), 96 * MiB);      // whole tensors
  EXPECT_EQ(SweepPassBytes(4 * MiB, 16 * MiB, {128 << 10, 1}), 16 * MiB);        // at least one
}

TEST(TopSettings, TheBestOfEachSideAndDirection) {
  // store read best 8M qd 64, store write best 128K qd 4, fio read best 1M qd 16, fio write best 4M qd 1.
  const SweepTable t = FakeTable({{8 << 20, 64, 4.0, 2.0, 3.0, 2.0},
                                  {128 << 10, 4, 2.0, 3.0, 1.0, 1.0},
                                  {1 << 20, 16, 3.0, 2.5, 3.5, 2.2},
                                  {4 << 20, 1, 1.0, 1.0, 1.0, 3.3},
                                  {256 << 10, 1, 0.5, 0.5, 0.5, 0.5}});
  EXPECT_EQ(TopSettings(t, 1), (std::vector<GridPoint>{{128 << 10, 4}, {1 << 20, 16}, {4 << 20, 1}, {8 << 20, 64}}));
  // Two per side adds the runners-up, never the setting that is last everywhere.
  const auto two = TopSettings(t, 2);
  EXPECT_EQ(two.size(), 4u);
  EXPECT_EQ(std::count(two.begin(), two.end(), GridPoint{256 << 10, 1}), 0);
  // Without fio only the store's bests count.
  EXPECT_EQ(TopSettings(FakeTable({{8 << 20, 64, 4.0, 2.0}, {128 << 10, 4, 2.0, 3.0}, {1 << 20, 1, 1.0, 1.0}}), 1),
            (std::vector<GridPoint>{{128 << 10, 4}, {8 << 20, 64}}));
}

TEST(UnconfirmedBests, OnlyBestsMeasuredOnce) {
  SweepTable t = FakeTable({{8 << 20, 64, 4.0, 2.0}, {128 << 10, 4, 2.0, 3.0}, {1 << 20, 16, 3.9, 2.9}});
  EXPECT_TRUE(UnconfirmedBests(t).empty());  // FakeTable's rows have 3 samples
  for (SweepRow& r : t.rows)
    if (r.block == (8u << 20) && r.direction == IoDirection::kRead) r.store.n = 1;
  EXPECT_EQ(UnconfirmedBests(t), (std::vector<GridPoint>{{8 << 20, 64}}));
  SweepTable f = FakeTable({{8 << 20, 64, 4.0, 2.0, 3.0, 2.0}, {1 << 20, 4, 3.0, 2.0, 3.5, 2.0}});
  for (SweepRow& r : f.rows)
    if (r.block == (1u << 20) && r.direction == IoDirection::kRead) r.fio.n = 1;  // fio's best read
  EXPECT_EQ(UnconfirmedBests(f), (std::vector<GridPoint>{{1 << 20, 4}}));
}

}  // namespace
}  // namespace strata::bench
