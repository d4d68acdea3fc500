// strata.loss_chunk and strata.mlp_chunk through the engine (Notes [Tiled loss], [Tiled MLP]):
// a run whose head's loss and MLPs are tiled follows the untiled run within fp32 rounding, step
// by step, on the host and on the fake device under random delays, with 2 ranks, accumulation,
// a tied embedding, and with kept and with recomputed activations; "auto" tiles only where a
// micro-batch's logits or MLP intermediates would be large, and says so.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/engine_test_util.h"
#include "src/config/train_config.h"
#include "src/settle/settle_keys.h"

namespace strata {
namespace {

TEST(TiledLossRun, FollowsTheUntiledRunWithinRounding) {
  testing::TempDir dir;
  TrainConfig c = testing::TinyConfig(dir.path());  // GPT-2, tied, 4 x 32 tokens, V 256
  c.grad_accum = 2;
  for (Recompute recompute : {Recompute::kNever, Recompute::kAlways}) {
  c.recompute = recompute;
  c.loss_chunk = c.mlp_chunk = 0;
  const testing::RunResult whole = testing::RunEngine(c, 2, 3);
  ASSERT_EQ(whole.stats.size(), 3u);
  c.loss_chunk = c.mlp_chunk = 24;  // tiles across sequence boundaries, the last one short
  const FakeDeviceOptions fake{.seed = 3, .max_delay_us = 1000};
  for (const FakeDeviceOptions* device : {static_cast<const FakeDeviceOptions*>(nullptr), &fake}) {
    SCOPED_TRACE(::testing::Message() << (device ? "fake device" : "host") << (recompute == Recompute::kNever ? ", kept" : ", recomputed"));
    const testing::RunResult tiled = testing::RunEngine(c, 2, 3, device);
    ASSERT_EQ(tiled.stats.size(), 3u);
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_NEAR(tiled.stats[s].loss, whole.stats[s].loss, 1e-6 * whole.stats[s].loss) << "step " << s;
      EXPECT_NEAR(tiled.stats[s].grad_norm, whole.stats[s].grad_norm, 1e-5 * whole.stats[s].grad_norm) << "step " << s;
    }
    EXPECT_LT(testing::MaxAbsDiff(whole, tiled), 1e-5);
  }
  }
}

TEST(TiledLossRun, AutoTilesOnlyLargeLogits) {
  testing::TempDir dir;
  TrainConfig c = testing::TinyConfig(dir.path());
  ResolveTileSizes(&c);
  EXPECT_EQ(c.loss_chunk, 0);  // 128 tokens x 256: untiled
  EXPECT_EQ(c.mlp_chunk, 0);
  c = testing::TinyConfig(dir.path());
  c.model.vocab_size = 32000;
  c.model.seq_len = 32768;
  c.micro_batch = 1;
  EXPECT_EQ(LossTileTokens(c), 2048);  // what the estimate counts before settling
  ResolveTileSizes(&c);
  EXPECT_EQ(c.loss_chunk, 2048);  // 256 MiB / (32000 x 4 B) = 2097 tokens: 2048
  const auto loss_auto = std::find_if(c.autos.begin(), c.autos.end(), [](const AutoValue& a) { return a.path == "strata.loss_chunk"; });
  ASSERT_NE(loss_auto, c.autos.end());
  EXPECT_NE(loss_auto->reason.find("4.19 GB"), std::string::npos) << loss_auto->reason;
  EXPECT_EQ(c.mlp_chunk, 0);  // 32 K tokens x 256 fp32 (1 KB each): 32 MB
  TrainConfig wide = c;
  wide.model.d_model = 4096;  // F = 4 x 4096 in fp32: 64 KB a token, 2 GiB a micro-batch
  wide.mlp_chunk = -1;
  EXPECT_EQ(MlpTileTokens(wide), 4096);
  c.loss_chunk = 100000;  // written: kept; the tile is at most the micro-batch
  ResolveTileSizes(&c);
  EXPECT_EQ(c.loss_chunk, 100000);
  EXPECT_EQ(LossTileTokens(c), 32768);
}

}  // namespace
}  // namespace strata
