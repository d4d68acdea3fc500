// Mixtures of experts in the engine (moe.h, Note [Router loss]): the load-balancing loss's
// gradient reaches each layer's router in that layer's backward, whichever way the backward
// gets its graph. A tiny Qwen3-MoE-shaped model with the loss trains bitwise alike with
// recomputation and kept activations, micro-batch- and layer-major, on the host and on the
// fake asynchronous device, with its states in memory or on NVMe; the loss is part of the
// reported loss and of the training (without it the routers train otherwise).
#include <gtest/gtest.h>

#include "src/model/model.h"
#include "tests/engine/engine_test_util.h"

namespace strata {
namespace {

using testing::RunEngine;
using testing::RunResult;
using testing::TempDir;

TrainConfig MoeConfig(const std::string& dir, double aux) {
  TrainConfig c = testing::TinyConfig(dir);
  c.model.arch = model::Arch::kLlama;
  c.model.hf_model_type = "qwen3_moe";
  c.model.qk_norm = true;
  c.model.n_kv_head = 2;
  c.model.moe = {4, 2, 32, true, {}, aux};
  c.grad_accum = 2;
  c.lr = 0.01;
  c.optimizer_overlap = OptimizerOverlap::kForward;  // the same update on every placement (auto may delay it)
  c.model.tie_embeddings = false;  // tied, the layer-major head sums the table's gradient in another order
  return c;
}

TEST(MoeEngine, TheRouterLossTrainsBitwiseAlikeOnEveryPath) {
  TempDir dir;
  const TrainConfig c = MoeConfig(dir.path(), 0.05);
  const RunResult reference = RunEngine(c, 2, 3);
  ASSERT_EQ(reference.stats.size(), 3u);
  const FakeDeviceOptions delays{.seed = 7, .max_delay_us = 200, .copy_gbps = 0, .poison = true};
  for (int variant = 0; variant < 4; ++variant) {
    SCOPED_TRACE(::testing::Message() << "variant " << variant);
    TrainConfig v = c;
    if (variant == 0) v.recompute = Recompute::kNever;  // kept activations
    if (variant == 1) v.schedule_setting = StepSchedule::kLayerMajor;
    if (variant >= 2) v.offload_param.device = v.offload_optimizer.device = Tier::kNvme;
    const RunResult run = RunEngine(v, 2, 3, variant == 3 ? &delays : nullptr);
    ASSERT_EQ(run.stats.size(), 3u);
    for (int s = 0; s < 3; ++s) EXPECT_EQ(run.stats[s].loss, reference.stats[s].loss) << "step " << s;
    EXPECT_TRUE(testing::BitwiseEqual(run, reference)) << "max diff " << testing::MaxAbsDiff(run, reference);
  }
  // Without the loss: another reported loss from the first step, other routers after it.
  const RunResult plain = RunEngine(MoeConfig(dir.path(), 0), 2, 3);
  EXPECT_GT(reference.stats[0].loss, plain.stats[0].loss);
  EXPECT_GT(testing::MaxAbsDiff(plain, reference), 1e-4);
}

TEST(MoeEngine, RefusesTheRouterLossWithFusedMicroBatches) {
  TempDir dir;
  TrainConfig c = MoeConfig(dir.path(), 0.05);
  c.schedule_setting = StepSchedule::kLayerMajor;
  c.fuse_micro_batches = true;
  const Status s = CheckKeys(c);  // what parsing a config runs
  EXPECT_NE(s.message().find("strata.model.moe.aux_loss_coef"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace strata
