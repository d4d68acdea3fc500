// The step-time model (src/estimate/step_time.h) on machines whose rates the test states: each
// resource's seconds are its work over its rate, the step combines them as the schedule
// overlaps them, and the binding resource is the slowest; the nominal machines and their names.
#include "src/estimate/step_time.h"

#include <gtest/gtest.h>

#include "src/config/train_config.h"
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

TEST(StepTime, NominalMachinesAndAnUnknownName) {
  for (const char* name : {"h100-pcie", "h100-sxm", "h200", "gh200"}) {
    auto m = NominalMachine(name);
    ASSERT_TRUE(m.ok()) << name;
    EXPECT_FALSE(m->host_device);
    EXPECT_GT(m->flops, 1e14);
    EXPECT_GT(m->device_memory, 0u);
  }
  EXPECT_GT(NominalMachine("gh200")->link_in, NominalMachine("h100-sxm")->link_in);  // NVLink-C2C
  const Status s = NominalMachine("a100").status();
  EXPECT_NE(s.message().find("unknown machine \"a100\""), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("h100-sxm"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace strata
