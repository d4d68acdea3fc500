// The NVMe bytes of a training step are what the placement's arithmetic says
// (EstimateStepTraffic): every state written once, read once, the working weights read once
// per forward and backward pass at most. Nothing is moved that the ledger does not account for.
#include "src/estimate/step_traffic.h"

#include <gtest/gtest.h>

#include "engine/engine_test_util.h"
#include "strata/communicator.h"
#include "support/settled.h"

namespace strata {
namespace {

using testing::TempDir;
using testing::TinyConfig;

struct Case {
  OptimizerOverlap overlap;
  int64_t grad_accum;
  int64_t host_blocks;
  Tier params;
  bool split_master = false;
  DType compute = DType::kBF16;
  bool moments_8bit = false;
};

void CheckTraffic(const TrainConfig& c) {
  auto data = data::TokenDataset::Open(c.data, c.model.vocab_size, c.model.seq_len);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  auto comm = MakeSingleRankCommunicator();
  const RunConfig run = testing::Settled(c, comm->world_size());
  auto engine = Engine::Create(run, comm.get(), nullptr);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  ASSERT_TRUE((*engine)->ledger() == (*engine)->plan().ledger);
  const StepTraffic want = EstimateStepTraffic(*run, (*engine)->plan());
  ASSERT_GT(want.states, 0u);
  constexpr int kSteps = 7, kSteady = 2;
  NvmeTierStats first, last;
  for (int s = 0; s < kSteps; ++s) {
    ASSERT_TRUE((*engine)->Step(s, **data).ok());
    // The optimizer's transfers run on its own thread, into the next step with an overlapped
    // update: the steady steps are counted from the end of one finished update (its writes
    // flushed) to the end of the last one, so that none is counted in part.
    if (s == kSteady - 1 || s == kSteps - 1) {
      ASSERT_TRUE((*engine)->Finish().ok());
      (s == kSteps - 1 ? last : first) = (*engine)->nvme_stats();
    }
  }
  const uint64_t read = last.bytes_read - first.bytes_read, written = last.bytes_written - first.bytes_written;
  const double steps = kSteps - kSteady, slack = 0.05 * want.written;
  EXPECT_NEAR(written / steps, static_cast<double>(want.written), slack);
  EXPECT_LE(read / steps, want.read_at_most + slack);
  EXPECT_GE(read / steps, want.states - slack);
}

TEST(StepTraffic, IsTheLedgersArithmetic) {
  TempDir dir;
  const Case cases[] = {
      {OptimizerOverlap::kNone, 1, 0, Tier::kNvme},    {OptimizerOverlap::kNone, 2, 0, Tier::kNvme},
      {OptimizerOverlap::kForward, 1, 0, Tier::kNvme}, {OptimizerOverlap::kForward, 2, 2, Tier::kNvme},
      {OptimizerOverlap::kDelayed, 1, 0, Tier::kNvme}, {OptimizerOverlap::kDelayed, 2, 1, Tier::kNvme},
      {OptimizerOverlap::kForward, 1, 0, Tier::kCpu},  {OptimizerOverlap::kNone, 2, 1, Tier::kCpu},
      // strata.master_weights "split": 2 B/param less master; the update reads the working weights
      {OptimizerOverlap::kForward, 1, 0, Tier::kNvme, true}, {OptimizerOverlap::kNone, 2, 1, Tier::kNvme, true},
      {OptimizerOverlap::kForward, 1, 1, Tier::kCpu, true},
      // fp32 compute: the working weights are the master (no master tensor); the update reads them
      {OptimizerOverlap::kForward, 1, 0, Tier::kNvme, false, DType::kF32},
      {OptimizerOverlap::kNone, 2, 1, Tier::kNvme, false, DType::kF32},
      {OptimizerOverlap::kDelayed, 1, 0, Tier::kNvme, false, DType::kF32},  // (its own master)
      // 8-bit m and v (1 B + a scale per 256 each)
      {OptimizerOverlap::kForward, 1, 0, Tier::kNvme, false, DType::kF32, true},
      {OptimizerOverlap::kForward, 2, 1, Tier::kNvme, true, DType::kBF16, true},
      {OptimizerOverlap::kDelayed, 1, 0, Tier::kNvme, false, DType::kBF16, true},
      // accumulation 4, layer-major ("auto" with the weights on NVMe): each block's weights read
      // once per forward and once per backward of the step, as at accumulation 1
      {OptimizerOverlap::kForward, 4, 0, Tier::kNvme}, {OptimizerOverlap::kNone, 4, 1, Tier::kNvme},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(::testing::Message() << OptimizerOverlapName(k.overlap) << " x" << k.grad_accum << " host blocks "
                                      << k.host_blocks << " params " << OffloadDeviceName(k.params) << " split master "
                                      << k.split_master << " compute " << DTypeName(k.compute) << " 8-bit moments "
                                      << k.moments_8bit);
    TrainConfig c = TinyConfig(dir.path());
    c.compute_dtype = k.compute;
    c.adam_states = DType::kBF16;
    c.offload_param.device = k.params;
    c.offload_optimizer.device = Tier::kNvme;
    c.optimizer_overlap = k.overlap;
    c.grad_accum = k.grad_accum;
    c.host_blocks = k.host_blocks;
    c.split_master = k.split_master;
    c.moments_8bit = k.moments_8bit;
    c.eval_interval = 0;
    CheckTraffic(c);
  }
}

// Off the host, what a step copies over the link is EstimateLinkTraffic's figure, to the byte.
TEST(StepTraffic, DeviceLinkBytesAreTheArithmetic) {
  TempDir dir;
  struct LinkCase {
    const char* name;
    void (*configure)(TrainConfig&);
  };
  const LinkCase cases[] = {
      {"params nvme, accumulation 3", [](TrainConfig& c) {
         c.offload_param.device = Tier::kNvme;
         c.grad_accum = 3;
       }},
      {"the same, summed on the device", [](TrainConfig& c) {
         c.offload_param.device = Tier::kNvme;
         c.grad_accum = 3;
         c.device_accumulation = 1;  // summed on the device
       }},
      {"2 blocks resident, bf16, params in host memory", [](TrainConfig& c) {
         c.compute_dtype = DType::kBF16;
         c.offload_param.device = Tier::kCpu;
         c.resident_blocks = 2;
       }},
      {"all resident, stage 2, untied llama, summed on the device", [](TrainConfig& c) {
         c.zero_stage = 2;
         c.model.arch = model::Arch::kLlama;
         c.model.tie_embeddings = false;
         c.model.n_kv_head = 2;
         c.grad_accum = 2;
         c.device_accumulation = 1;  // summed on the device
       }},
  };
  for (const LinkCase& k : cases) {
    SCOPED_TRACE(k.name);
    TrainConfig c = TinyConfig(dir.path());
    c.offload_optimizer.device = Tier::kCpu;
    c.optimizer_overlap = OptimizerOverlap::kNone;  // each step's copies end within it
    c.eval_interval = 0;
    k.configure(c);
    auto data = data::TokenDataset::Open(c.data, c.model.vocab_size, c.model.seq_len);
    ASSERT_TRUE(data.ok()) << data.status().ToString();
    auto comm = MakeSingleRankCommunicator();
    auto device_comm = MakeSingleRankCommunicator();
    FakeDeviceOptions fake{.seed = 3, .max_delay_us = 300};
    fake.counters = std::make_shared<LinkCounters>();
    auto device = MakeFakeAsyncDevice(device_comm.get(), fake);
    const RunConfig run = testing::Settled(c, comm->world_size(), device->is_host());
    auto engine = Engine::Create(run, comm.get(), nullptr, {}, device.get());
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    const LinkTraffic want =
        EstimateLinkTraffic(*run, ShardPlan::Make(*run, ModelShape::Of(run->model), 1, 0, {.host = false}));
    ASSERT_GT(want.in + want.out, 0u);
    for (int s = 0; s < 3; ++s) {
      const uint64_t in = fake.counters->in, out = fake.counters->out;
      ASSERT_TRUE((*engine)->Step(s, **data).ok());
      ASSERT_TRUE(device->Synchronize().ok());
      EXPECT_EQ(fake.counters->in - in, want.in) << "step " << s;
      EXPECT_EQ(fake.counters->out - out, want.out) << "step " << s;
    }
  }
}

TEST(StepTraffic, CountsEachWorkingReadOfTheSchedule) {
  SettledConfig c(TinyConfig("/unused"));
  ShardPlan p;  // only its ledger and where it keeps the master are read
  MemoryLedger& l = p.ledger;
  l.Add(StateKind::kWorking, Tier::kNvme, 100);
  l.Add(StateKind::kMaster, Tier::kNvme, 200);
  l.Add(StateKind::kAdamM, Tier::kNvme, 100);
  l.Add(StateKind::kAdamV, Tier::kNvme, 100);
  l.Add(StateKind::kMaster, Tier::kCpu, 999);  // host blocks: no disk
  c.grad_accum = 3;
  c.optimizer_overlap = OptimizerOverlap::kForward;
  StepTraffic t = EstimateStepTraffic(c, p);
  EXPECT_EQ(t.written, 500u);
  EXPECT_EQ(t.read_at_most, 400u + 6 * 100u);
  EXPECT_EQ(t.read_served, 400u + 5 * 100u);  // the first forward reads the update's write-back
  c.optimizer_overlap = OptimizerOverlap::kDelayed;  // the forward runs before the update
  EXPECT_EQ(EstimateStepTraffic(c, p).read_served, 400u + 6 * 100u);
  c.model.lora.r = 4;  // the base is frozen: read, never written
  t = EstimateStepTraffic(c, p);
  EXPECT_EQ(t.written, 400u);
  EXPECT_EQ(t.read_served, 400u + 6 * 100u);
  c.model.lora.r = 0;
  c.optimizer_overlap = OptimizerOverlap::kForward;
  for (bool split : {true, false}) {  // the update reads the weights it replaces: its master (or high halves)
    p.format = StateFormat(split ? MasterFormat::kSplit : MasterFormat::kInWorking, MomentFormat::kFp32,
                           split ? DType::kBF16 : DType::kF32);
    t = EstimateStepTraffic(c, p);
    EXPECT_EQ(t.read_at_most, 400u + 7 * 100u);
    EXPECT_EQ(t.read_served, 400u + 6 * 100u);
  }
}

}  // namespace
}  // namespace strata
