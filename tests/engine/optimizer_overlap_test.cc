// Note [Optimizer overlap], Note [Speculative update]: the optimizer running on its own
// thread while the next forward goes on ("forward"), and besides updating blocks during the
// backward ("speculative"), give bitwise the plain schedule ("none"): losses, norms, skipped
// steps, and rank 0's whole state (working weights, fp32 master, Adam m and v), for every
// offload, stages 2 and 3, 2 ranks, bf16 and fp16 with a planted overflow, with a clipping
// threshold that some steps exceed (their speculative updates are redone; those of the
// others stand; those of the overflow step are rolled back).
#include <gtest/gtest.h>

#include "engine/engine_test_util.h"
#include "strata/communicator.h"
#include "strata/trace.h"
#include "support/settled.h"

namespace strata {
namespace {

using testing::RunEngine;
using testing::TempDir;
using testing::TinyConfig;

class OverlapModes : public ::testing::TestWithParam<std::tuple<Tier, int, DType>> {};

TEST_P(OverlapModes, IsBitwiseThePlainSchedule) {
  const auto [offload, stage, dtype] = GetParam();
  TempDir dir;
  TrainConfig c = TinyConfig(dir.path());
  c.zero_stage = stage;
  c.offload_param.device = stage == 3 ? offload : Tier::kDevice;
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
  for (Tier offload : {Tier::kDevice, Tier::kNvme}) {
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
  for (Tier offload : {Tier::kCpu, Tier::kNvme}) {
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
  c.offload_param.device = c.offload_optimizer.device = Tier::kCpu;
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
    ::testing::Combine(::testing::Values(Tier::kDevice, Tier::kCpu, Tier::kNvme),
                       ::testing::Values(2, 3), ::testing::Values(DType::kBF16, DType::kF16)),
    [](const auto& info) {
      return std::string(OffloadDeviceName(std::get<0>(info.param))) + "_stage" +
             std::to_string(std::get<1>(info.param)) + "_" + DTypeName(std::get<2>(info.param));
    });

// Note [Delayed update]: step s+1 is computed at the weights from before step s's update. So
// the delayed run's step 1 is a plain run's whose step 0 was skipped (a planted overflow: the
// same weights, the same batch), and its step 2 a plain run's whose step 1 was skipped (the
// weights after one update, at Adam's step 1), bitwise. More blocks than parking buffers (the
// update waits for the backward), gradient accumulation, and an asynchronous device with
// injected delays give the same run bitwise; it learns.
TEST(DelayedUpdate, EachStepSeesTheWeightsFromBeforeTheLastUpdate) {
  TempDir dir;
  TrainConfig c = TinyConfig(dir.path());
  c.model.n_layer = 4;  // 6 blocks, 2 parking buffers
  c.offload_param.device = c.offload_optimizer.device = Tier::kNvme;
  c.compute_dtype = DType::kBF16;
  c.sub_group_size = 20000;
  c.optimizer_overlap = OptimizerOverlap::kNone;
  auto plain_skipping = [&](int step) {
    TrainConfig p = c;
    p.debug_overflow_step = step;
    return RunEngine(p, 2, 3);
  };
  const auto skip0 = plain_skipping(0), skip1 = plain_skipping(1);
  const auto plain = RunEngine(c, 2, 6);
  ASSERT_EQ(skip0.stats.size(), 3u);
  ASSERT_EQ(skip1.stats.size(), 3u);
  EXPECT_TRUE(skip0.stats[0].skipped);
  EXPECT_TRUE(skip1.stats[1].skipped);

  c.optimizer_overlap = OptimizerOverlap::kDelayed;
  const auto delayed = RunEngine(c, 2, 6);
  ASSERT_EQ(delayed.stats.size(), 6u);
  EXPECT_GT(delayed.ledger.Of(StateKind::kPinnedBuffers), plain.ledger.Of(StateKind::kPinnedBuffers))
      << "the parking buffers are counted";
  EXPECT_EQ(delayed.stats[0].loss, plain.stats[0].loss);
  EXPECT_EQ(delayed.stats[1].loss, skip0.stats[1].loss);
  EXPECT_EQ(delayed.stats[1].grad_norm, skip0.stats[1].grad_norm);
  EXPECT_EQ(delayed.stats[2].loss, skip1.stats[2].loss);
  EXPECT_EQ(delayed.stats[2].grad_norm, skip1.stats[2].grad_norm);
  EXPECT_NE(delayed.stats[2].loss, plain.stats[2].loss);  // not the plain schedule
  EXPECT_LT(delayed.stats[5].loss, delayed.stats[0].loss);

  const FakeDeviceOptions fake{.seed = 5, .max_delay_us = 800};
  const auto async = RunEngine(c, 2, 6, &fake);
  ASSERT_EQ(async.stats.size(), 6u);
  for (int s = 0; s < 6; ++s) EXPECT_EQ(async.stats[s].loss, delayed.stats[s].loss) << "step " << s;
  EXPECT_TRUE(testing::BitwiseEqual(delayed, async));
  EXPECT_TRUE(delayed.state == async.state) << "working weights, master, m or v differ";

  // strata.delayed_update_from 2: the updates of steps 0 and 1 are the plain schedule's, so
  // steps 0-2 are; step 3 is computed at the weights from before step 2's update.
  c.delayed_update_from = 2;
  const auto from2 = RunEngine(c, 2, 4);
  ASSERT_EQ(from2.stats.size(), 4u);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(from2.stats[s].loss, plain.stats[s].loss) << "step " << s;
  EXPECT_NE(from2.stats[3].loss, plain.stats[3].loss);
  c.delayed_update_from = 0;

  // Two micro-batches: each one's gradients wait for the update; the same on the fake device.
  c.grad_accum = 2;
  const auto accumulated = RunEngine(c, 2, 4);
  const auto accumulated_async = RunEngine(c, 2, 4, &fake);
  ASSERT_EQ(accumulated.stats.size(), 4u);
  EXPECT_TRUE(testing::BitwiseEqual(accumulated, accumulated_async));
  EXPECT_TRUE(accumulated.state == accumulated_async.state);
  EXPECT_LT(accumulated.stats[3].loss, accumulated.stats[0].loss);
}

// The last micro-batch reads the first sub-groups' states for the update that follows it, one
// more per block of its backward while the optimizer pool has free buffers: with the forward
// overlapped, the previous update is often still running when the micro-batch starts.
TEST(OptimizerOverlap, TheBackwardReadsTheUpdatesFirstStates) {
  TempDir dir;
  TrainConfig c = TinyConfig(dir.path());
  c.model.n_layer = 4;
  c.sub_group_size = 2000;  // many sub-groups: more than the optimizer pool holds
  c.offload_param.device = c.offload_optimizer.device = Tier::kNvme;
  auto data = data::TokenDataset::Open(c.data, c.model.vocab_size, c.model.seq_len);
  ASSERT_TRUE(data.ok());
  for (OptimizerOverlap mode : {OptimizerOverlap::kForward, OptimizerOverlap::kNone}) {
    SCOPED_TRACE(OptimizerOverlapName(mode));
    c.optimizer_overlap = mode;
    Tracer tracer;
    auto comm = MakeSingleRankCommunicator();
    auto engine = Engine::Create(testing::Settled(c, comm->world_size()), comm.get(), &tracer);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    for (int s = 0; s < 3; ++s) ASSERT_TRUE((*engine)->Step(s, **data).ok());
    ASSERT_TRUE((*engine)->Finish().ok());
    // The last step: from its last forward block to its update's gradient norm.
    double backward = 0, norm = 0;
    for (const TraceEvent& e : tracer.Events()) {
      if (e.track == Track::kCompute && e.name.starts_with("forward b")) backward = std::max(backward, e.end_s);
      if (e.track == Track::kOptimizer && e.name == "gradient norm") norm = std::max(norm, e.start_s);
    }
    ASSERT_LT(backward, norm);
    int early = 0;
    for (const TraceEvent& e : tracer.Events())
      early += e.track == Track::kNvmeRead && e.name.ends_with(".adam_m") && e.start_s > backward && e.start_s < norm;
    EXPECT_GE(early, 3);
  }
}

}  // namespace
}  // namespace strata
