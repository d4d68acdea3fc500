// Settling strata.data.epochs (src/settle/settle.h, step 6): with the data's size known, the run
// ends after its epochs (the last partial batch dropped) or at strata.steps, whichever is first;
// the schedule still ends where strata.steps said; epochs that fill no batch are an error.
#include <gtest/gtest.h>

#include "src/settle/settle.h"

namespace strata {
namespace {

TEST(SettleEpochs, TheRunEndsWithItsEpochsOrItsSteps) {
  auto written = ParseTrainConfig(R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
      "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 10, "total_num_steps": 300}},
      "strata": {"steps": 300, "data": {"epochs": 2}}})", "test");
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  auto settle = [&](int64_t epoch_windows, int world = 1) {
    SettleContext context{world, world, false, {true}, nullptr};
    context.epoch_windows = epoch_windows;
    return SettleRunConfig(*written, context);
  };
  // 2 epochs of 100 windows in batches of 4 x 2 x 1 rank: 25 steps; of 2 ranks: 12 (the last partial batch dropped).
  EXPECT_EQ(settle(100)->config->steps, 25);
  EXPECT_EQ(settle(100, 2)->config->steps, 12);
  EXPECT_EQ(settle(100)->config->schedule.total_num_steps, 300);  // the schedule ends where strata.steps said
  EXPECT_EQ(settle(100000)->config->steps, 300);                   // strata.steps comes first
  EXPECT_EQ(settle(0)->config->steps, 300);                        // the data's size not known: as written
  auto none = settle(3);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("strata.data.epochs 2: 3 window(s) of 129 tokens an epoch fill no batch of 8"),
            std::string::npos) << none.status().ToString();
}

}  // namespace
}  // namespace strata
