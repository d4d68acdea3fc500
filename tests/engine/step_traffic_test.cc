// The NVMe bytes of a training step are what the placement's arithmetic says
// (EstimateStepTraffic): every state written once, read once, the working weights read once
// per forward and backward pass at most. Nothing is moved that the ledger does not account for.
#include "src/estimate/step_traffic.h"

#include <gtest/gtest.h>

#include "engine/engine_test_util.h"
#include "strata/communicator.h"

namespace strata {
namespace {

using testing::TempDir;
using testing::TinyConfig;

struct Case {
  OptimizerOverlap overlap;
  int64_t grad_accum;
  int64_t host_blocks;
  OffloadDevice params;
};

void CheckTraffic(const TrainConfig& c) {
  auto data = data::TokenDataset::Open(c.data, c.model.vocab_size, c.model.seq_len);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  auto comm = MakeSingleRankCommunicator();
  auto engine = Engine::Create(c, comm.get(), nullptr);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  const StepTraffic want = EstimateStepTraffic(c, (*engine)->ledger());
  ASSERT_GT(want.states, 0u);
  constexpr int kSteps = 7, kSteady = 2;
  uint64_t read = 0, written = 0;
  for (int s = 0; s < kSteps; ++s) {
    const NvmeTierStats before = (*engine)->nvme_stats();
    ASSERT_TRUE((*engine)->Step(s, **data).ok());
    const NvmeTierStats after = (*engine)->nvme_stats();
    if (s < kSteady) continue;
    read += after.bytes_read - before.bytes_read;
    written += after.bytes_written - before.bytes_written;
  }
  // The optimizer's transfers run on its own thread, into the next step with an overlapped
  // update: single steps scatter around the figures, their means do not.
  const double steps = kSteps - kSteady, slack = 0.05 * want.written;
  EXPECT_NEAR(written / steps, static_cast<double>(want.written), slack);
  EXPECT_LE(read / steps, want.read_at_most + slack);
  EXPECT_GE(read / steps, want.states - slack);
}

TEST(StepTraffic, IsTheLedgersArithmetic) {
  TempDir dir;
  const Case cases[] = {
      {OptimizerOverlap::kNone, 1, 0, OffloadDevice::kNvme},    {OptimizerOverlap::kNone, 2, 0, OffloadDevice::kNvme},
      {OptimizerOverlap::kForward, 1, 0, OffloadDevice::kNvme}, {OptimizerOverlap::kForward, 2, 2, OffloadDevice::kNvme},
      {OptimizerOverlap::kDelayed, 1, 0, OffloadDevice::kNvme}, {OptimizerOverlap::kDelayed, 2, 1, OffloadDevice::kNvme},
      {OptimizerOverlap::kForward, 1, 0, OffloadDevice::kCpu},  {OptimizerOverlap::kNone, 2, 1, OffloadDevice::kCpu},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(::testing::Message() << OptimizerOverlapName(k.overlap) << " x" << k.grad_accum << " host blocks "
                                      << k.host_blocks << " params " << OffloadDeviceName(k.params));
    TrainConfig c = TinyConfig(dir.path());
    c.compute_dtype = DType::kBF16;
    c.adam_states = DType::kBF16;
    c.offload_param.device = k.params;
    c.offload_optimizer.device = OffloadDevice::kNvme;
    c.optimizer_overlap = k.overlap;
    c.grad_accum = k.grad_accum;
    c.host_blocks = k.host_blocks;
    c.eval_interval = 0;
    CheckTraffic(c);
  }
}

TEST(StepTraffic, CountsEachWorkingReadOfTheSchedule) {
  TrainConfig c = TinyConfig("/unused");
  MemoryLedger l;
  l.Add(StateKind::kWorking, Residence::kNvme, 100);
  l.Add(StateKind::kMaster, Residence::kNvme, 200);
  l.Add(StateKind::kAdamM, Residence::kNvme, 100);
  l.Add(StateKind::kAdamV, Residence::kNvme, 100);
  l.Add(StateKind::kMaster, Residence::kCpu, 999);  // host blocks: no disk
  c.grad_accum = 3;
  c.optimizer_overlap = OptimizerOverlap::kForward;
  StepTraffic t = EstimateStepTraffic(c, l);
  EXPECT_EQ(t.written, 500u);
  EXPECT_EQ(t.read_at_most, 400u + 6 * 100u);
  EXPECT_EQ(t.read_served, 400u + 5 * 100u);  // the first forward reads the update's write-back
  c.optimizer_overlap = OptimizerOverlap::kDelayed;  // the forward runs before the update
  EXPECT_EQ(EstimateStepTraffic(c, l).read_served, 400u + 6 * 100u);
  c.model.lora.r = 4;  // the base is frozen: read, never written
  t = EstimateStepTraffic(c, l);
  EXPECT_EQ(t.written, 400u);
  EXPECT_EQ(t.read_served, 400u + 6 * 100u);
}

}  // namespace
}  // namespace strata
