// strata.schedule "layer_major" (Note [Layer-major schedule], src/engine/engine_layer_major.cc):
// every micro-batch through a block before the next block. Where each parameter's gradient is
// summed in the same order (untied embeddings), the run is bitwise the micro-batch-major one
// on the host and on the fake asynchronous device under random delays, across ZeRO stages,
// placements, update modes, LoRA, kept activations, bf16 and an fp16 overflow, and after a
// resume mid-run; with a tied embedding the head's shares are summed first: equal within fp32
// rounding. What "auto" picks, and what the estimator counts for it.
#include <gtest/gtest.h>

#include <functional>

#include "engine/engine_test_util.h"
#include "src/estimate/estimator.h"
#include "src/settle/settle.h"
#include "strata/communicator.h"
#include "support/settled.h"

namespace strata {
namespace {

using testing::RunEngine;
using testing::RunResult;
using testing::TempDir;
using testing::TinyConfig;

// The tiny LLaMA with its own head (untied): the case whose order of sums is the same.
TrainConfig UntiedLlama(const std::string& dir, int64_t accumulation) {
  TrainConfig c = TinyConfig(dir);
  c.model.arch = model::Arch::kLlama;
  c.model.tie_embeddings = false;
  c.model.n_kv_head = 2;
  c.grad_accum = accumulation;
  return c;
}

TrainConfig WithSchedule(TrainConfig c, StepSchedule s) {
  c.schedule_setting = s;
  return c;
}

struct ScheduleCase {
  const char* name;
  std::function<void(TrainConfig&)> configure;
  int world;
};

const ScheduleCase kScheduleCases[] = {
    {"stage3_nvme_forward", [](TrainConfig& c) {
       c.offload_param.device = c.offload_optimizer.device = Tier::kNvme;
     }, 1},
    {"stage3_nvme_two_ranks", [](TrainConfig& c) {
       c.offload_param.device = c.offload_optimizer.device = Tier::kNvme;
     }, 2},
    {"stage1_cpu_none", [](TrainConfig& c) {
       c.zero_stage = 1;
       c.offload_param.device = c.offload_optimizer.device = Tier::kCpu;
       c.optimizer_overlap = OptimizerOverlap::kNone;
     }, 2},
    {"stage2_speculative_clipped", [](TrainConfig& c) {
       c.zero_stage = 2;
       c.offload_optimizer.device = Tier::kCpu;
       c.optimizer_overlap = OptimizerOverlap::kSpeculative;
       c.gradient_clipping = 0.05;  // clips: the speculated blocks are redone
     }, 2},
    {"stage3_delayed_nvme", [](TrainConfig& c) {
       c.offload_param.device = c.offload_optimizer.device = Tier::kNvme;
       c.optimizer_overlap = OptimizerOverlap::kDelayed;
     }, 1},
    {"lora_nvme_base", [](TrainConfig& c) {
       c.offload_param.device = Tier::kNvme;
       c.model.lora.r = 4;
       c.model.lora.alpha = 8;
       c.model.lora.target_modules = {"q_proj", "v_proj", "down_proj"};
       c.lr = 0.01;
     }, 2},
    {"kept_activations_bf16", [](TrainConfig& c) {
       c.offload_param.device = Tier::kNvme;
       c.recompute = Recompute::kNever;
       c.compute_dtype = DType::kBF16;
       c.grad_accum_dtype = DType::kBF16;
     }, 1},
    {"fp16_overflow_cpu_params", [](TrainConfig& c) {
       c.offload_param.device = Tier::kCpu;
       c.compute_dtype = DType::kF16;
       c.debug_overflow_step = 1;
     }, 2},
};

class LayerMajor : public ::testing::TestWithParam<int> {};

TEST_P(LayerMajor, IsBitwiseTheMicroBatchScheduleOnTheHost) {
  const ScheduleCase& k = kScheduleCases[GetParam()];
  TempDir dir;
  TrainConfig c = UntiedLlama(dir.path(), 3);
  k.configure(c);
  const RunResult micro = RunEngine(WithSchedule(c, StepSchedule::kMicroBatch), k.world, 3);
  const RunResult layer = RunEngine(WithSchedule(c, StepSchedule::kLayerMajor), k.world, 3);
  testing::ExpectSameRun(micro, layer, 3);
  EXPECT_EQ(layer.state, micro.state);  // working weights, master, m and v: every byte
}

INSTANTIATE_TEST_SUITE_P(Cases, LayerMajor, ::testing::Range(0, static_cast<int>(std::size(kScheduleCases))),
                         [](const auto& info) { return std::string(kScheduleCases[info.param].name); });

// The fake device's queues under random delays (copies, collectives, the host callbacks that
// accumulate): layer-major there is the host's micro-batch-major run, bit for bit.
TEST(LayerMajorFakeDevice, IsTheHostsMicroBatchScheduleUnderRandomDelays) {
  TempDir dir;
  TrainConfig c = UntiedLlama(dir.path(), 3);
  c.offload_param.device = Tier::kNvme;
  c.offload_optimizer.device = Tier::kCpu;
  const RunResult host = RunEngine(WithSchedule(c, StepSchedule::kMicroBatch), 2, 3);
  ASSERT_EQ(host.stats.size(), 3u);
  // With and without device accumulation; with the block inputs in host memory between their
  // forward and backward (strata.block_inputs "host": copied out and back in on the queues).
  for (int variant = 0; variant < 3; ++variant) {
    TrainConfig d = WithSchedule(c, StepSchedule::kLayerMajor);
    d.device_accumulation = variant == 1 ? 1 : 0;
    if (variant == 2) d.block_inputs = BlockInputsAt::kHost;
    for (int seed = 1; seed <= 6; ++seed) {
      SCOPED_TRACE(::testing::Message() << "variant " << variant << ", delay seed " << seed);
      const FakeDeviceOptions fake{.seed = static_cast<uint64_t>(seed), .max_delay_us = 2000};
      testing::ExpectSameRun(host, RunEngine(d, 2, 3, &fake), 3);
    }
  }
}

// A tied embedding: the heads of every micro-batch run before the embedding's backward, so the
// sum of their shares of the tied table joins micro-batch 0's gradient (Note [Layer-major
// schedule]). The same sum in another order: within fp32 rounding of it, not bitwise.
TEST(LayerMajorTied, IsWithinRoundingOfTheMicroBatchSchedule) {
  TempDir dir;
  TrainConfig c = TinyConfig(dir.path());  // GPT-2: the head borrows the token table
  c.grad_accum = 4;
  c.offload_param.device = Tier::kNvme;
  const RunResult micro = RunEngine(WithSchedule(c, StepSchedule::kMicroBatch), 1, 3);
  const RunResult layer = RunEngine(WithSchedule(c, StepSchedule::kLayerMajor), 1, 3);
  ASSERT_EQ(layer.stats.size(), 3u);
  ASSERT_EQ(micro.stats.size(), 3u);
  EXPECT_EQ(layer.stats[0].loss, micro.stats[0].loss);  // the same first weights
  for (int s = 0; s < 3; ++s) {
    EXPECT_NEAR(layer.stats[s].loss, micro.stats[s].loss, 1e-4 * micro.stats[s].loss) << "step " << s;
    EXPECT_NEAR(layer.stats[s].grad_norm, micro.stats[s].grad_norm, 1e-4 * micro.stats[s].grad_norm) << "step " << s;
  }
  // Adam moves a weight by about lr per step whatever its gradient's size: where a rounding
  // flips the sign of a gradient near zero the runs may step apart by 2 lr, never more.
  EXPECT_LT(testing::MaxAbsDiff(micro, layer), 2 * 3 * c.lr);
}

// A checkpoint taken mid-run (the whole state and the counters) restored into a new engine goes
// on as if never stopped, and both are the micro-batch-major run.
TEST(LayerMajorResume, GoesOnBitwiseFromAMidRunCheckpoint) {
  TempDir dir;
  TrainConfig c = UntiedLlama(dir.path(), 4);
  c.offload_param.device = c.offload_optimizer.device = Tier::kNvme;
  auto data = data::TokenDataset::Open(c.data, c.model.vocab_size, c.model.seq_len);
  ASSERT_TRUE(data.ok());
  auto comm = MakeSingleRankCommunicator();
  auto make = [&](StepSchedule s) {
    auto e = Engine::Create(testing::Settled(WithSchedule(c, s), 1), comm.get(), nullptr);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return std::move(*e);
  };
  std::unique_ptr<Engine> straight = make(StepSchedule::kLayerMajor), micro = make(StepSchedule::kMicroBatch);
  ASSERT_TRUE(straight->config().layer_major);
  ASSERT_FALSE(micro->config().layer_major);
  std::unique_ptr<Engine> first = make(StepSchedule::kLayerMajor);
  for (int s = 0; s < 2; ++s) ASSERT_TRUE(first->Step(s, **data).ok());
  const testing::StateBytes saved = testing::VisitAll(*first);
  std::unique_ptr<Engine> resumed = make(StepSchedule::kLayerMajor);
  testing::RestoreAll(*resumed, saved);
  resumed->set_counters(first->counters());
  for (int s = 0; s < 4; ++s) {
    auto a = straight->Step(s, **data), m = micro->Step(s, **data);
    ASSERT_TRUE(a.ok() && m.ok());
    EXPECT_EQ(a->loss, m->loss) << s;
    if (s < 2) continue;
    auto b = resumed->Step(s, **data);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(a->loss, b->loss) << s;
  }
  const testing::StateBytes end = testing::VisitAll(*straight);
  EXPECT_TRUE(testing::VisitAll(*resumed) == end);
  EXPECT_TRUE(testing::VisitAll(*micro) == end);
}

// strata.fuse_micro_batches: each block runs the step's micro-batches as one batch. The same
// arithmetic up to the order of the sums inside the matrix products: within rounding of the
// micro-batch-major run; on the fake device under random delays, bitwise the host's fused run;
// resumed mid-run, bitwise the run that never stopped.
TEST(LayerMajorFused, IsWithinRoundingOfTheMicroBatchSchedule) {
  TempDir dir;
  TrainConfig c = UntiedLlama(dir.path(), 4);
  c.offload_param.device = c.offload_optimizer.device = Tier::kNvme;
  const RunResult micro = RunEngine(WithSchedule(c, StepSchedule::kMicroBatch), 1, 3);
  TrainConfig f = WithSchedule(c, StepSchedule::kLayerMajor);
  f.fuse_micro_batches = true;
  const RunResult fused = RunEngine(f, 1, 3);
  ASSERT_EQ(fused.stats.size(), 3u);
  ASSERT_EQ(micro.stats.size(), 3u);
  for (int s = 0; s < 3; ++s) {
    EXPECT_NEAR(fused.stats[s].loss, micro.stats[s].loss, 1e-4 * micro.stats[s].loss) << "step " << s;
    EXPECT_NEAR(fused.stats[s].grad_norm, micro.stats[s].grad_norm, 1e-3 * micro.stats[s].grad_norm) << "step " << s;
  }
  EXPECT_LT(testing::MaxAbsDiff(micro, fused), 2 * 3 * c.lr);
  EXPECT_LT(fused.stats[2].loss, fused.stats[0].loss);

  const FakeDeviceOptions fake{.seed = 3, .max_delay_us = 2000};
  for (int world : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << world << " rank(s) on the fake device, block inputs in host memory");
    const RunResult host = world == 1 ? fused : RunEngine(f, world, 3);
    TrainConfig on_host = f;
    on_host.block_inputs = BlockInputsAt::kHost;
    testing::ExpectSameRun(host, RunEngine(on_host, world, 3, &fake), 3);
  }
}

TEST(LayerMajorFused, ResumesBitwiseAndRefusesWhatItCannotDo) {
  TempDir dir;
  TrainConfig c = UntiedLlama(dir.path(), 3);
  c.offload_param.device = Tier::kNvme;
  c.fuse_micro_batches = true;  // (implies layer-major under "auto")
  auto data = data::TokenDataset::Open(c.data, c.model.vocab_size, c.model.seq_len);
  ASSERT_TRUE(data.ok());
  auto comm = MakeSingleRankCommunicator();
  auto make = [&] {
    auto e = Engine::Create(testing::Settled(c, 1), comm.get(), nullptr);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return std::move(*e);
  };
  std::unique_ptr<Engine> straight = make(), first = make();
  ASSERT_TRUE(straight->config().layer_major);
  for (int s = 0; s < 2; ++s) ASSERT_TRUE(first->Step(s, **data).ok());
  std::unique_ptr<Engine> resumed = make();
  testing::RestoreAll(*resumed, testing::VisitAll(*first));
  resumed->set_counters(first->counters());
  for (int s = 0; s < 4; ++s) {
    auto a = straight->Step(s, **data);
    ASSERT_TRUE(a.ok());
    if (s < 2) continue;
    auto b = resumed->Step(s, **data);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(a->loss, b->loss) << s;
  }
  EXPECT_TRUE(testing::VisitAll(*resumed) == testing::VisitAll(*straight));

  TrainConfig micro = WithSchedule(c, StepSchedule::kMicroBatch);
  Status s = CheckKeys(micro);
  EXPECT_NE(s.message().find("strata.fuse_micro_batches: needs the layer-major schedule"), std::string::npos) << s.message();
  TrainConfig dropout = c;
  dropout.model.lora.r = 4;
  dropout.model.lora.target_modules = {"q_proj"};
  dropout.model.lora.dropout = 0.1;
  s = CheckKeys(dropout);
  EXPECT_NE(s.message().find("not with strata.model.lora.dropout"), std::string::npos) << s.message();
}

// "auto" is layer-major where a step fetches each block's weights per micro-batch: from NVMe,
// or over the host link off the host; never with one micro-batch; as written otherwise.
TEST(LayerMajorAuto, PicksItWhereFetchesRepeat) {
  TempDir dir;
  TrainConfig c = TinyConfig(dir.path());
  c.grad_accum = 4;
  auto settled = [&](const TrainConfig& k, bool host) { return testing::Settled(k, 1, host)->layer_major; };
  c.offload_param.device = Tier::kNvme;
  EXPECT_TRUE(settled(c, true));
  EXPECT_FALSE(settled(WithSchedule(c, StepSchedule::kMicroBatch), true));
  c.offload_param.device = Tier::kCpu;
  EXPECT_FALSE(settled(c, true));  // on the host the weights are read in place
  EXPECT_TRUE(settled(c, false));  // off it they cross the link at every visit
  c.offload_param.device = Tier::kDevice;
  EXPECT_FALSE(settled(c, false));
  EXPECT_TRUE(settled(WithSchedule(c, StepSchedule::kLayerMajor), false));
  c.offload_param.device = Tier::kNvme;
  c.grad_accum = 1;
  EXPECT_FALSE(settled(c, true));
}

// Where layer-major's block inputs alone would not fit the machine, "auto" keeps the
// micro-batch-major schedule and says why; given room, layer-major.
TEST(LayerMajorAuto, FallsBackWhereTheBlockInputsDoNotFit) {
  TempDir dir;
  TrainConfig c = TinyConfig(dir.path());
  c.grad_accum = 64;
  c.micro_batch = 16;
  c.offload_param.device = Tier::kNvme;
  const uint64_t micro = EstimateMemory(*testing::Settled(WithSchedule(c, StepSchedule::kMicroBatch)), 1).node_host_bytes(1);
  const uint64_t layer = EstimateMemory(*testing::Settled(WithSchedule(c, StepSchedule::kLayerMajor)), 1).node_host_bytes(1);
  ASSERT_GT(layer, micro + 1000000);
  for (const uint64_t host : {(micro + layer) / 2, 2 * layer}) {
    MachineCapacity m;
    m.host_available = host;
    m.nvme_free = uint64_t{1} << 40;
    m.nvme_dir = dir.path();
    auto settled = SettleRunConfig(c, {1, 1, false, {true}, &m});
    ASSERT_TRUE(settled.ok()) << settled.status().ToString();
    const bool room = host > layer;
    EXPECT_EQ(settled->config->layer_major, room);
    bool said = false;
    for (const AutoValue& a : settled->config->autos)
      said = said || (a.path == "strata.schedule" && a.value == (room ? "layer_major" : "micro_batch"));
    EXPECT_TRUE(said);
  }
}

// The estimator keeps every micro-batch's block inputs layer-major: accumulation times one
// micro-batch's, and the activations grow by the difference.
TEST(LayerMajorEstimate, CountsEveryMicroBatchsBlockInputs) {
  TempDir dir;
  TrainConfig c = TinyConfig(dir.path());
  c.grad_accum = 8;
  c.offload_param.device = Tier::kNvme;
  const MemoryEstimate micro = EstimateMemory(*testing::Settled(WithSchedule(c, StepSchedule::kMicroBatch)), 1);
  const MemoryEstimate layer = EstimateMemory(*testing::Settled(WithSchedule(c, StepSchedule::kLayerMajor)), 1);
  ASSERT_GT(micro.boundary_activations, 0u);
  EXPECT_EQ(layer.boundary_activations, 8 * micro.boundary_activations);
  EXPECT_EQ(layer.activations - micro.activations, layer.boundary_activations - micro.boundary_activations);
  EXPECT_TRUE(layer.ledger == micro.ledger);  // the state is the same
  // Off the host, strata.block_inputs "host" moves them from the device's activations to host memory.
  TrainConfig h = WithSchedule(c, StepSchedule::kLayerMajor);
  h.block_inputs = BlockInputsAt::kHost;
  const MemoryEstimate on_device = EstimateMemory(*testing::Settled(WithSchedule(c, StepSchedule::kLayerMajor), 1, false), 1, 0, {false});
  const MemoryEstimate on_host = EstimateMemory(*testing::Settled(h, 1, false), 1, 0, {false});
  EXPECT_EQ(on_host.host_inputs, on_device.boundary_activations);
  EXPECT_EQ(on_device.activations - on_host.activations, on_host.host_inputs);
  EXPECT_EQ(on_host.host_peak() - on_device.host_peak(), on_host.host_inputs);
  h.recompute = Recompute::kNever;
  EXPECT_NE(CheckKeys(h).message().find("strata.block_inputs \"host\": needs recomputation"), std::string::npos);
}

}  // namespace
}  // namespace strata
