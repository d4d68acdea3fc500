// Ulysses and tensor parallelism in the engine (Notes [Ulysses], [Tensor parallel]) on the fake
// asynchronous device, a random delay on every operation: the blocks' all-to-alls and
// all-reduces (on communicators of their own) run among ZeRO's gathers, reductions and NVMe
// reads completing at random moments, in both schedules; each run is bitwise the one on the
// host, and its losses and gradient norms the data-parallel run's of the same global batch
// within 1e-6.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/engine_test_util.h"
#include "src/estimate/group_traffic.h"
#include "support/temp_dir.h"

namespace strata {
namespace {

using testing::RunEngine;
using testing::RunResult;

struct Axis {
  const char* name;
  int64_t TrainConfig::*size;
  uint64_t seed;
};

class ModelParallelEngine : public ::testing::TestWithParam<Axis> {};

TEST_P(ModelParallelEngine, OnTheFakeDeviceWithRandomDelaysItIsTheHostRunBitwise) {
  for (StepSchedule schedule : {StepSchedule::kMicroBatch, StepSchedule::kLayerMajor}) {
    SCOPED_TRACE(schedule == StepSchedule::kLayerMajor ? "layer-major" : "micro-batch-major");
    testing::TempDir dir;
    TrainConfig split = testing::RecomputedLlama(dir.path(), schedule);
    split.*GetParam().size = 2;
    TrainConfig data = split;
    data.*GetParam().size = 1;
    data.micro_batch_set = data.micro_batch = split.micro_batch / 2;
    FakeDeviceOptions fake;
    fake.seed = GetParam().seed;
    fake.max_delay_us = 300;
    const RunResult host = RunEngine(split, 2, 3);
    const RunResult device = RunEngine(split, 2, 3, &fake);
    testing::ExpectSameRun(host, device, 3);
    const RunResult whole = RunEngine(data, 2, 3);
    ASSERT_EQ(whole.stats.size(), 3u);
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_LE(std::abs(host.stats[s].loss - whole.stats[s].loss), 1e-6 * std::abs(whole.stats[s].loss)) << "step " << s;
      EXPECT_LE(std::abs(host.stats[s].grad_norm - whole.stats[s].grad_norm), 1e-6 * whole.stats[s].grad_norm)
          << "step " << s;
    }
  }
}

// What the blocks' groups carried (the fake device counts every call) is the step-time
// model's arithmetic (group_traffic.h): with recompute and without, with the vocabulary-split
// loss's sums and gathers where the loss is tiled.
TEST_P(ModelParallelEngine, TheGroupsCarryWhatTheEstimateCounts) {
  for (bool recompute : {true, false}) {
    SCOPED_TRACE(recompute ? "recompute" : "kept activations");
    testing::TempDir dir;
    TrainConfig cfg = testing::RecomputedLlama(dir.path(), StepSchedule::kMicroBatch);
    cfg.*GetParam().size = 2;
    cfg.recompute = recompute ? Recompute::kAlways : Recompute::kNever;
    cfg.loss_chunk = recompute ? 8 : 0;
    FakeDeviceOptions fake;
    fake.seed = GetParam().seed;
    fake.counters = std::make_shared<LinkCounters>();
    RunEngine(cfg, 2, 2, &fake);
    const GroupTraffic expected = EstimateGroupTraffic(*testing::Settled(cfg, 2, /*host_device=*/false));
    EXPECT_TRUE(expected.any());
    EXPECT_EQ(static_cast<double>(fake.counters->group_summed), 2 * 2 * expected.summed);
    EXPECT_EQ(static_cast<double>(fake.counters->group_gathered), 2 * 2 * expected.gathered);
    EXPECT_EQ(static_cast<double>(fake.counters->group_exchanged), 2 * 2 * expected.exchanged);
  }
}

INSTANTIATE_TEST_SUITE_P(Axes, ModelParallelEngine,
                         ::testing::Values(Axis{"sequence", &TrainConfig::sequence_parallel, 5},
                                           Axis{"tensor", &TrainConfig::tensor_parallel, 7}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace strata
