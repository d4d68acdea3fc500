// Note [Early gradient sums] (src/engine/engine_step.cc): off the host each block's share of
// the gradient norm is taken on the host callback thread once its gradient is final. On the
// fake device under random delays, with and without device accumulation, 1 and 2 ranks, a tied
// embedding and a planted overflow, the run is bitwise the host's (losses, norms, skips, every
// parameter), and every block with a gradient had its sum taken early.
#include <gtest/gtest.h>

#include "engine/engine_test_util.h"

namespace strata {
namespace {

TEST(EarlyGradientSums, AreTakenOffTheHostAndLeaveTheRunBitwise) {
  for (int world : {1, 2}) {
    for (int variant = 0; variant < 3; ++variant) {
      testing::TempDir dir;
      TrainConfig c = testing::TinyConfig(dir.path());  // GPT-2, tied embedding
      c.grad_accum = 3;
      c.zero_stage = world == 2 ? 2 : 3;
      c.offload_optimizer.device = Tier::kCpu;
      c.device_accumulation = variant == 1 ? 1 : 0;
      if (variant == 2) {  // fp16 with an overflow planted at step 1: that step is skipped
        c.compute_dtype = DType::kF16;
        c.debug_overflow_step = 1;
      }
      const testing::RunResult host = testing::RunEngine(c, world, 3);
      ASSERT_EQ(host.stats.size(), 3u);
      for (const StepStats& s : host.stats) EXPECT_EQ(s.early_sum_blocks, 0);  // nothing to hide there
      for (int seed = 1; seed <= 3; ++seed) {
        SCOPED_TRACE(::testing::Message() << world << " rank(s), variant " << variant << ", delay seed " << seed);
        const FakeDeviceOptions fake{.seed = static_cast<uint64_t>(seed), .max_delay_us = 1500};
        const testing::RunResult off = testing::RunEngine(c, world, 3, &fake);
        testing::ExpectSameRun(host, off, 3);
        ASSERT_EQ(off.stats.size(), 3u);
        for (const StepStats& s : off.stats) EXPECT_EQ(s.early_sum_blocks, static_cast<int>(off.master.size()));
      }
    }
  }
}

}  // namespace
}  // namespace strata
