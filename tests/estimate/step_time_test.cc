// The step-time model (src/estimate/step_time.h) on machines whose rates the test states: each
// resource's seconds are its work over its rate, the step combines them as the schedule
// overlaps them, and the binding resource is the slowest; the nominal machines and their names.
#include "src/estimate/step_time.h"

#include <gtest/gtest.h>

#include "src/config/train_config.h"
#include "src/estimate/group_traffic.h"
#include "support/settled.h"

namespace strata {
namespace {

// A 1 B LLaMA (the configs' shape), everything on NVMe, 1 x 128 tokens, accumulation 16.
SettledConfig Llama1b(StepSchedule schedule) {
  auto c = ParseTrainConfig(R"({
    "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 16, "bf16": {"enabled": true},
    "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/var/tmp/strata"},
                          "offload_optimizer": {"device": "nvme", "nvme_path": "/var/tmp/strata"}},
    "strata": {"recompute": "always",
               "model": {"arch": "llama", "vocab_size": 32000, "seq_len": 128, "n_layer": 16, "d_model": 2048,
                         "n_head": 32, "n_kv_head": 8, "ffn_hidden": 8192}}})", "Llama1b");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  c->schedule_setting = schedule;
  return *testing::Settled(*c);
}

MachineRates SlowDisk() {
  MachineRates m;
  m.name = "a test machine";
  m.flops = 1e12;
  m.nvme_read = m.nvme_write = 1e9;
  m.adam = 1e9;
  m.accumulate = 1e10;
  return m;
}

double Seconds(const StepTimePrediction& p, const std::string& resource) {
  for (const ResourceTime& r : p.resources)
    if (r.name == resource) return r.seconds;
  ADD_FAILURE() << "no " << resource;
  return 0;
}

TEST(StepTime, EachResourceIsItsWorkOverItsRate) {
  const SettledConfig c = Llama1b(StepSchedule::kMicroBatch);
  const ShardPlan plan = ShardPlan::Make(c, ModelShape::Of(c.model), 1, 0);
  const StepTimePrediction p = PredictStepTime(c, plan, SlowDisk());
  EXPECT_DOUBLE_EQ(Seconds(p, "compute"), StepFlops(c) / 1e12);
  EXPECT_GT(Seconds(p, "NVMe"), Seconds(p, "compute"));  // 76 B/param per step at 1 GB/s
  EXPECT_EQ(p.binding, "NVMe");
  EXPECT_GE(p.step_s, Seconds(p, "NVMe"));
  EXPECT_NE(FormatPrediction(p, SlowDisk()).find("bound by NVMe"), std::string::npos);
}

TEST(StepTime, LayerMajorCutsTheDiskTimeItBinds) {
  const SettledConfig micro = Llama1b(StepSchedule::kMicroBatch), layer = Llama1b(StepSchedule::kLayerMajor);
  ASSERT_TRUE(layer.layer_major);
  const StepTimePrediction a = PredictStepTime(micro, ShardPlan::Make(micro, ModelShape::Of(micro.model), 1, 0), SlowDisk());
  const StepTimePrediction b = PredictStepTime(layer, ShardPlan::Make(layer, ModelShape::Of(layer.model), 1, 0), SlowDisk());
  // Reads of 2 x 16 x 2 B/param of bf16 weights and 12 of fp32 states fall to 2 x 2 + 12; 14 written.
  EXPECT_NEAR(Seconds(a, "NVMe") / Seconds(b, "NVMe"), (64.0 + 12 + 14) / (4.0 + 12 + 14), 0.1);
  EXPECT_EQ(Seconds(a, "compute"), Seconds(b, "compute"));
  EXPECT_LT(b.step_s, a.step_s / 2);
}

// Tensor and sequence parallelism (Notes [Tensor parallel], [Ulysses]): the groups' collectives
// are their bytes received over the group link, in line with the compute (on the host the
// compute thread runs them; on a GPU, the compute stream). Over the host ring every call is a
// world all-gather, so a rank receives more there than over NCCL's ring and direct sends.
TEST(StepTime, TheGroupsCollectivesAreTheirBytesOverTheGroupLink) {
  for (auto [tensor, sequence] : {std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}}) {
    SCOPED_TRACE(::testing::Message() << "tensor " << tensor << ", sequence " << sequence);
    TrainConfig c = Llama1b(StepSchedule::kMicroBatch);
    c.tensor_parallel = tensor;
    c.sequence_parallel = sequence;
    const int world = 4;
    auto run = testing::TrySettle(c, world, /*host_device=*/false);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    const SettledConfig& split = **run;
    const GroupTraffic g = EstimateGroupTraffic(split);
    EXPECT_EQ(g.summed > 0, tensor > 1);
    EXPECT_EQ(g.exchanged > 0, sequence > 1);
    const double nccl = g.Received(false, world), ring = g.Received(true, world);
    EXPECT_GT(ring, nccl);
    MachineRates m = SlowDisk();  // made fast: the compute binds, and the collectives with it
    m.host_device = false;
    m.nvme_read = m.nvme_write = 1e13;
    m.adam = 1e12;
    m.link_in = m.link_out = 1e11;
    m.group_link = 1e10;
    const ShardPlan plan = ShardPlan::Make(split, ModelShape::Of(split.model), world, 0, {false});
    const StepTimePrediction p = PredictStepTime(split, plan, m);
    EXPECT_DOUBLE_EQ(Seconds(p, "group collectives"), nccl / 1e10);
    m.group_link = 0;  // not counted
    const StepTimePrediction without = PredictStepTime(split, plan, m);
    EXPECT_NEAR(p.step_s - without.step_s, nccl / 1e10, 1e-9 * p.step_s);
  }
  // A sublayer's all-reduce of a rank's tokens x d_model, in each forward (two with recompute)
  // and in the backward, over the tensor group's ring: 2 (T - 1) / T of it received.
  TrainConfig c = Llama1b(StepSchedule::kMicroBatch);
  c.tensor_parallel = 2;
  const SettledConfig split = *testing::Settled(c, 2, /*host_device=*/false);
  const double sums = 16.0 /* layers */ * 2 * 3 * 16 /* micro-batches */ * 128 * 2048 * 2 /* bf16 */;
  EXPECT_DOUBLE_EQ(EstimateGroupTraffic(split).summed, sums);
  EXPECT_DOUBLE_EQ(EstimateGroupTraffic(split).Received(false, 2), sums);
}

TEST(StepTime, NominalMachinesAndAnUnknownName) {
  for (const char* name : {"h100-pcie", "h100-sxm", "h200", "gh200"}) {
    auto m = NominalMachine(name);
    ASSERT_TRUE(m.ok()) << name;
    EXPECT_FALSE(m->host_device);
    EXPECT_GT(m->flops, 1e14);
    EXPECT_GT(m->device_memory, 0u);
    EXPECT_GT(m->group_link, 0);
  }
  EXPECT_GT(NominalMachine("gh200")->link_in, NominalMachine("h100-sxm")->link_in);  // NVLink-C2C
  const Status s = NominalMachine("a100").status();
  EXPECT_NE(s.message().find("unknown machine \"a100\""), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("h100-sxm"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace strata
