// Note [Optimizer overlap], Note [Speculative update]: the optimizer running on its own
// thread while the next forward goes on ("forward"), and besides updating blocks during the
// backward ("speculative"), give bitwise the plain schedule ("none"): losses, norms, skipped
// steps, and rank 0's whole state (working weights, fp32 master, Adam m and v), for every
// offload, stages 2 and 3, 2 ranks, bf16 and fp16 with a planted overflow, with a clipping
// threshold that some steps exceed (their speculative updates are redone; those of the
// others stand; those of the overflow step are rolled back).
#include <gtest/gtest.h>

#include "engine/engine_test_util.h"

namespace strata {
namespace {

using testing::RunEngine;
using testing::TempDir;
using testing::TinyConfig;

class OverlapModes : public ::testing::TestWithParam<std::tuple<OffloadDevice, int, DType>> {};

TEST_P(OverlapModes, IsBitwiseThePlainSchedule) {
  const auto [offload, stage, dtype] = GetParam();
  TempDir dir;
  TrainConfig c = TinyConfig(dir.path());
  c.zero_stage = stage;
  c.offload_param.device = stage == 3 ? offload : OffloadDevice::kNone;
  c.offload_optimizer.device = offload;
  c.compute_dtype = dtype;
  c.gradient_clipping = 2.1;  // the first two steps clip (bf16 norms 3.34, 2.20), the others not (1.98 .. 1.83)
  c.sub_group_size = 20000;  // several sub-groups per block: the NVMe pipeline crosses blocks
  if (dtype == DType::kF16) {
    c.debug_overflow_step = 2;
    c.loss_scale.initial_scale_power = 8;
  }
  c.optimizer_overlap = OptimizerOverlap::kNone;
  const auto plain = RunEngine(c, 2, 6);
  ASSERT_EQ(plain.stats.size(), 6u);
  ASSERT_FALSE(plain.state.empty());
  int clipped = 0;
  for (int s = 0; s < 6; ++s) clipped += !plain.stats[s].skipped && plain.stats[s].grad_norm > c.gradient_clipping;
  EXPECT_GE(clipped, 2);
  EXPECT_LE(clipped, 4);  // and some steps do not clip: the speculation stands
  if (dtype == DType::kF16) {
    EXPECT_TRUE(plain.stats[2].skipped);
  }
  for (OptimizerOverlap mode : {OptimizerOverlap::kForward, OptimizerOverlap::kSpeculative}) {
    SCOPED_TRACE(OptimizerOverlapName(mode));
    c.optimizer_overlap = mode;
    const auto overlapped = RunEngine(c, 2, 6);
    ASSERT_EQ(overlapped.stats.size(), 6u);
    for (int s = 0; s < 6; ++s) {
      const StepStats& o = overlapped.stats[s];
      EXPECT_EQ(o.loss, plain.stats[s].loss) << "step " << s;
      EXPECT_EQ(o.skipped, plain.stats[s].skipped) << "step " << s;
      if (!plain.stats[s].skipped) {
        EXPECT_EQ(o.grad_norm, plain.stats[s].grad_norm) << "step " << s;
      }
      if (mode == OptimizerOverlap::kSpeculative) {  // every block speculated; redone when the step clipped
        EXPECT_EQ(o.speculated_blocks, 4) << "step " << s;
        const bool clips = !o.skipped && o.grad_norm > c.gradient_clipping;
        EXPECT_EQ(o.redone_blocks, clips ? o.speculated_blocks : 0) << "step " << s;
      } else {
        EXPECT_EQ(o.speculated_blocks, 0);
      }
    }
    EXPECT_TRUE(testing::BitwiseEqual(plain, overlapped));
    EXPECT_TRUE(plain.state == overlapped.state) << "working weights, master, m or v differ";
  }
}

// The speculative updates on an asynchronous device (gradients reach the host on its callback
// thread, with injected delays; blocks resident on the device or fetched from NVMe), with
// gradient accumulation, and with a budget that leaves the first blocks to the plain path.
TEST(Speculation, OnAnAsynchronousDeviceWithAccumulationAndABudget) {
  TempDir dir;
  TrainConfig c = TinyConfig(dir.path());
  c.grad_accum = 2;
  c.gradient_clipping = 2.2;
  c.sub_group_size = 20000;
  const FakeDeviceOptions fake{.seed = 11, .max_delay_us = 800};
  for (OffloadDevice offload : {OffloadDevice::kNone, OffloadDevice::kNvme}) {
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(::testing::Message() << OffloadDeviceName(offload) << " " << DTypeName(dtype));
      c.offload_param.device = c.offload_optimizer.device = offload;
      c.compute_dtype = dtype;
      c.debug_overflow_step = dtype == DType::kF16 ? 1 : -1;
      c.optimizer_overlap = OptimizerOverlap::kNone;
      const auto plain = RunEngine(c, 2, 4);
      c.optimizer_overlap = OptimizerOverlap::kSpeculative;
      const auto speculative = RunEngine(c, 2, 4, &fake);
      ASSERT_EQ(speculative.stats.size(), 4u);
      for (int s = 0; s < 4; ++s) {
        EXPECT_EQ(speculative.stats[s].loss, plain.stats[s].loss) << "step " << s;
        EXPECT_EQ(speculative.stats[s].speculated_blocks, 4) << "step " << s;
      }
      EXPECT_TRUE(testing::BitwiseEqual(plain, speculative));
      EXPECT_TRUE(plain.state == speculative.state) << "working weights, master, m or v differ";
    }
  }
  // Adam's moments in bf16 (strata.adam_states): the speculation backs them up as they are.
  for (OffloadDevice offload : {OffloadDevice::kCpu, OffloadDevice::kNvme}) {
    SCOPED_TRACE(::testing::Message() << "bf16 moments, " << OffloadDeviceName(offload));
    c.offload_param.device = c.offload_optimizer.device = offload;
    c.compute_dtype = DType::kBF16;
    c.adam_states = DType::kBF16;
    c.debug_overflow_step = -1;
    c.optimizer_overlap = OptimizerOverlap::kNone;
    const auto plain = RunEngine(c, 2, 4);
    c.optimizer_overlap = OptimizerOverlap::kSpeculative;
    const auto speculative = RunEngine(c, 2, 4);
    EXPECT_TRUE(testing::BitwiseEqual(plain, speculative));
    EXPECT_TRUE(plain.state == speculative.state);
    EXPECT_LT(plain.stats.back().loss, plain.stats.front().loss);
  }
  // And the gradient accumulators in bf16 too (strata.gradient_accumulator).
  c.grad_accum_dtype = DType::kBF16;
  c.optimizer_overlap = OptimizerOverlap::kNone;
  const auto plain16 = RunEngine(c, 2, 4);
  c.optimizer_overlap = OptimizerOverlap::kSpeculative;
  const auto speculative16 = RunEngine(c, 2, 4, &fake);
  EXPECT_TRUE(testing::BitwiseEqual(plain16, speculative16));
  EXPECT_TRUE(plain16.state == speculative16.state);
  EXPECT_LT(plain16.stats.back().loss, plain16.stats.front().loss);
  TrainConfig fp32_grads = c;
  fp32_grads.grad_accum_dtype = DType::kF32;
  EXPECT_EQ(plain16.ledger.Of(StateKind::kGradAccum) * 2, RunEngine(fp32_grads, 2, 1).ledger.Of(StateKind::kGradAccum));
  c.grad_accum_dtype = DType::kF32;
  c.adam_states = DType::kF32;
  // A budget for the last two blocks only (d_model 256: a layer's backup is ~5.5 MB per rank).
  c.model.d_model = 256;
  c.offload_param.device = c.offload_optimizer.device = OffloadDevice::kCpu;
  c.compute_dtype = DType::kBF16;
  c.debug_overflow_step = -1;
  c.optimizer_overlap = OptimizerOverlap::kNone;
  const auto plain = RunEngine(c, 2, 3);
  c.optimizer_overlap = OptimizerOverlap::kSpeculative;
  c.speculation_budget_mb = 8;
  const auto some = RunEngine(c, 2, 3);
  ASSERT_EQ(some.stats.size(), 3u);
  EXPECT_EQ(some.stats[0].speculated_blocks, 2);
  EXPECT_GT(some.ledger.Of(StateKind::kSpeculationBackup), 0u);
  EXPECT_LE(some.ledger.Of(StateKind::kSpeculationBackup), 8u << 20);
  EXPECT_TRUE(testing::BitwiseEqual(plain, some));
  EXPECT_TRUE(plain.state == some.state);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, OverlapModes,
    ::testing::Combine(::testing::Values(OffloadDevice::kNone, OffloadDevice::kCpu, OffloadDevice::kNvme),
                       ::testing::Values(2, 3), ::testing::Values(DType::kBF16, DType::kF16)),
    [](const auto& info) {
      return std::string(OffloadDeviceName(std::get<0>(info.param))) + "_stage" +
             std::to_string(std::get<1>(info.param)) + "_" + DTypeName(std::get<2>(info.param));
    });

}  // namespace
}  // namespace strata
