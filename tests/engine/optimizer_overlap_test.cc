// Note [Optimizer overlap]: the optimizer running on its own thread while the next forward
// goes on ("forward") gives bitwise the plain schedule ("none"): losses, norms, skipped
// steps, and rank 0's whole state (working weights, fp32 master, Adam m and v), for every
// offload, stages 2 and 3, 2 ranks, bf16 and fp16 with a planted overflow, with a clipping
// threshold low enough that most steps clip.
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
  c.gradient_clipping = 0.3;
  c.sub_group_size = 20000;  // several sub-groups per block: the NVMe pipeline crosses blocks
  if (dtype == DType::kF16) {
    c.debug_overflow_step = 2;
    c.loss_scale.initial_scale_power = 8;
  }
  c.optimizer_overlap = OptimizerOverlap::kNone;
  const auto plain = RunEngine(c, 2, 6);
  c.optimizer_overlap = OptimizerOverlap::kForward;
  const auto overlapped = RunEngine(c, 2, 6);
  ASSERT_EQ(plain.stats.size(), 6u);
  ASSERT_EQ(overlapped.stats.size(), 6u);
  int clipped = 0;
  for (int s = 0; s < 6; ++s) {
    EXPECT_EQ(overlapped.stats[s].loss, plain.stats[s].loss) << "step " << s;
    EXPECT_EQ(overlapped.stats[s].skipped, plain.stats[s].skipped) << "step " << s;
    if (!plain.stats[s].skipped) {
      EXPECT_EQ(overlapped.stats[s].grad_norm, plain.stats[s].grad_norm) << "step " << s;
    }
    clipped += !plain.stats[s].skipped && plain.stats[s].grad_norm > c.gradient_clipping;
  }
  EXPECT_GE(clipped, 3);
  if (dtype == DType::kF16) {
    EXPECT_TRUE(plain.stats[2].skipped);
  }
  EXPECT_TRUE(testing::BitwiseEqual(plain, overlapped));
  ASSERT_FALSE(plain.state.empty());
  EXPECT_TRUE(plain.state == overlapped.state) << "working weights, master, m or v differ";
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
