// strata.loss_chunk through the engine (Note [Tiled loss]): a run whose head's loss is tiled
// follows the untiled run within fp32 rounding, step by step, on the host and on the fake
// device under random delays, with 2 ranks, accumulation and a tied embedding; "auto" tiles
// only where a micro-batch's logits would be large, and says so.
#include <gtest/gtest.h>

#include "engine/engine_test_util.h"
#include "src/config/train_config.h"

namespace strata {
namespace {

TEST(TiledLossRun, FollowsTheUntiledRunWithinRounding) {
  testing::TempDir dir;
  TrainConfig c = testing::TinyConfig(dir.path());  // GPT-2, tied, 4 x 32 tokens, V 256
  c.grad_accum = 2;
  c.loss_chunk = 0;
  const testing::RunResult whole = testing::RunEngine(c, 2, 3);
  ASSERT_EQ(whole.stats.size(), 3u);
  c.loss_chunk = 24;  // tiles across sequence boundaries, the last one short
  const FakeDeviceOptions fake{.seed = 3, .max_delay_us = 1000};
  for (const FakeDeviceOptions* device : {static_cast<const FakeDeviceOptions*>(nullptr), &fake}) {
    SCOPED_TRACE(device ? "fake device" : "host");
    const testing::RunResult tiled = testing::RunEngine(c, 2, 3, device);
    ASSERT_EQ(tiled.stats.size(), 3u);
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_NEAR(tiled.stats[s].loss, whole.stats[s].loss, 1e-6 * whole.stats[s].loss) << "step " << s;
      EXPECT_NEAR(tiled.stats[s].grad_norm, whole.stats[s].grad_norm, 1e-5 * whole.stats[s].grad_norm) << "step " << s;
    }
    EXPECT_LT(testing::MaxAbsDiff(whole, tiled), 1e-5);
  }
}

TEST(TiledLossRun, AutoTilesOnlyLargeLogits) {
  testing::TempDir dir;
  TrainConfig c = testing::TinyConfig(dir.path());
  ResolveLossChunk(&c);
  EXPECT_EQ(c.loss_chunk, 0);  // 128 tokens x 256: untiled
  c = testing::TinyConfig(dir.path());
  c.model.vocab_size = 32000;
  c.model.seq_len = 32768;
  c.micro_batch = 1;
  EXPECT_EQ(LossTileTokens(c), 2048);  // what the estimate counts before settling
  ResolveLossChunk(&c);
  EXPECT_EQ(c.loss_chunk, 2048);  // 256 MiB / (32000 x 4 B) = 2097 tokens: 2048
  ASSERT_FALSE(c.autos.empty());
  EXPECT_EQ(c.autos.back().path, "strata.loss_chunk");
  EXPECT_NE(c.autos.back().reason.find("4.19 GB"), std::string::npos) << c.autos.back().reason;
  c.loss_chunk = 100000;  // written: kept; the tile is at most the micro-batch
  ResolveLossChunk(&c);
  EXPECT_EQ(c.loss_chunk, 100000);
  EXPECT_EQ(LossTileTokens(c), 32768);
}

}  // namespace
}  // namespace strata
