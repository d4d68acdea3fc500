// strata.block_inputs (Note [Block inputs in the tiers], src/engine/block_inputs.h): with
// recompute, each block's saved input waits in host memory (off the host) or in the swap file
// between its forward and its backward. Either way the run is bitwise the one that keeps them
// where they were made: on the host, on the fake asynchronous device under random delays, on
// 2 ranks, both schedules, with accumulation, and after a resume. What the estimator counts
// and chooses for them, and what the keys refuse.
#include <gtest/gtest.h>


#include "engine/engine_test_util.h"
#include "src/engine/block_inputs.h"
#include "src/estimate/estimator.h"
#include "src/settle/settle_autos.h"
#include "strata/communicator.h"
#include "support/settled.h"

namespace strata {
namespace {

using testing::ExpectSameRun;
using testing::RecomputedLlama;
using testing::RunEngine;
using testing::RunResult;
using testing::TempDir;

TrainConfig At(TrainConfig c, BlockInputsAt at) {
  c.block_inputs = at;
  return c;
}

TEST(BlockInputsTier, TheSwapFileIsTheDeviceRunOnTheHost) {
  for (StepSchedule schedule : {StepSchedule::kMicroBatch, StepSchedule::kLayerMajor}) {
    for (int world : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << StepScheduleName(schedule) << ", " << world << " rank(s)");
      TempDir a, b;
      const RunResult kept = RunEngine(At(RecomputedLlama(a.path(), schedule), BlockInputsAt::kDevice), world, 3);
      const RunResult swapped = RunEngine(At(RecomputedLlama(b.path(), schedule), BlockInputsAt::kNvme), world, 3);
      ExpectSameRun(kept, swapped, 3);
      // Every layer's input of every micro-batch went to the disk (block 0's, the tokens, and the
      // head's stay); read back, those whose write had landed when needed.
      const uint64_t input = 4 * 32 * 64 * 4;  // micro-batch x seq x d_model x fp32
      for (size_t s = 0; s < 3; ++s) {
        EXPECT_EQ(swapped.stats[s].block_inputs_written, 2 * 2 * input) << "step " << s;
        EXPECT_LE(swapped.stats[s].block_inputs_read, swapped.stats[s].block_inputs_written) << "step " << s;
        EXPECT_EQ(kept.stats[s].block_inputs_written, 0u);
      }
    }
  }
}

TEST(BlockInputsTier, OffTheHostEveryPlacementIsTheHostRunUnderRandomDelays) {
  for (StepSchedule schedule : {StepSchedule::kMicroBatch, StepSchedule::kLayerMajor}) {
    TempDir dir;
    const RunResult host = RunEngine(RecomputedLlama(dir.path(), schedule), 2, 3);
    for (BlockInputsAt at : {BlockInputsAt::kHost, BlockInputsAt::kNvme}) {
      for (int seed = 1; seed <= 4; ++seed) {
        SCOPED_TRACE(::testing::Message() << StepScheduleName(schedule) << ", block inputs " << BlockInputsName(at)
                                          << ", delay seed " << seed);
        TempDir run_dir;
        const FakeDeviceOptions fake{.seed = static_cast<uint64_t>(seed), .max_delay_us = 2000};
        ExpectSameRun(host, RunEngine(At(RecomputedLlama(run_dir.path(), schedule), at), 2, 3, &fake), 3);
      }
    }
  }
}

TEST(BlockInputsTier, ResumesBitwiseFromTheSwapFile) {
  TempDir a, b, c;
  const TrainConfig straight_cfg = At(RecomputedLlama(a.path(), StepSchedule::kMicroBatch), BlockInputsAt::kNvme);
  auto data = data::TokenDataset::Open(straight_cfg.data, straight_cfg.model.vocab_size, straight_cfg.model.seq_len);
  ASSERT_TRUE(data.ok());
  auto comm = MakeSingleRankCommunicator();
  auto make = [&](const std::string& dir) {
    TrainConfig k = straight_cfg;
    k.offload_param.nvme_path = k.offload_optimizer.nvme_path = dir;
    auto e = Engine::Create(testing::Settled(k, 1), comm.get(), nullptr);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return std::move(*e);
  };
  std::unique_ptr<Engine> straight = make(a.path()), first = make(b.path());
  for (int s = 0; s < 2; ++s) ASSERT_TRUE(first->Step(s, **data).ok());
  std::unique_ptr<Engine> resumed = make(c.path());
  testing::RestoreAll(*resumed, testing::VisitAll(*first));
  resumed->set_counters(first->counters());
  for (int s = 0; s < 4; ++s) {
    auto x = straight->Step(s, **data);
    ASSERT_TRUE(x.ok()) << x.status().ToString();
    if (s < 2) continue;
    auto y = resumed->Step(s, **data);
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    EXPECT_EQ(x->loss, y->loss) << s;
  }
  EXPECT_TRUE(testing::VisitAll(*resumed) == testing::VisitAll(*straight));
}

TEST(BlockInputsTier, TheEstimateCountsThemOnDiskAndAutoPicksTheDiskWhenHostMemoryIsShort) {
  TempDir dir;
  TrainConfig c = RecomputedLlama(dir.path(), StepSchedule::kMicroBatch);
  c.model.seq_len = 4096;  // inputs large beside the tiny model
  const MemoryEstimate device = EstimateMemory(*testing::Settled(At(c, BlockInputsAt::kDevice)), 1);
  const MemoryEstimate nvme = EstimateMemory(*testing::Settled(At(c, BlockInputsAt::kNvme)), 1);
  ASSERT_GT(device.boundary_activations, 0u);
  EXPECT_GE(nvme.nvme_on_disk - device.nvme_on_disk, device.boundary_activations);
  EXPECT_LT(nvme.host_peak(), device.host_peak());  // (on the host device activations are host memory)
  EXPECT_TRUE(nvme.ledger == device.ledger);        // the state is where it was

  // "auto" with host memory between the two: the disk; with plenty: where they are made.
  MachineCapacity m;
  m.host_available = (nvme.host_peak() + device.host_peak()) / 2;
  SettledConfig a(c);
  EstimateResolvingAutos(&a, 1, 0, {true}, m, 1);
  EXPECT_EQ(a.block_inputs_at, BlockInputsAt::kNvme);
  a = SettledConfig(c);
  m.host_available = device.host_peak() * 4;
  EstimateResolvingAutos(&a, 1, 0, {true}, m, 1);
  EXPECT_EQ(a.block_inputs_at, BlockInputsAt::kDevice);
}

TEST(BlockInputsTier, KeysRefuseWhatCannotMoveThem) {
  TempDir dir;
  TrainConfig c = At(RecomputedLlama(dir.path(), StepSchedule::kMicroBatch), BlockInputsAt::kNvme);
  c.offload_param.device = c.offload_optimizer.device = Tier::kCpu;
  Status s = CheckKeys(c);
  EXPECT_NE(s.message().find("strata.block_inputs \"nvme\": needs a swap folder"), std::string::npos) << s.message();
  c.offload_optimizer.device = Tier::kNvme;
  EXPECT_TRUE(CheckKeys(c).ok());
  c.recompute = Recompute::kNever;
  s = CheckKeys(c);
  EXPECT_NE(s.message().find("strata.block_inputs \"nvme\": needs recomputation"), std::string::npos) << s.message();
  auto parsed = ParseTrainConfig(R"({"strata": {"block_inputs": "disk"}})", "test");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("block_inputs"), std::string::npos) << parsed.status().message();
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// The stash alone on the host device: an input whose write has landed comes back from the
// disk (counted), one still in memory is used from there; the bytes are the input's either way.
TEST(BlockInputStash, ReadsBackWhatItWroteAndCountsIt) {
  TempDir dir;
  TieredStoreOptions so;
  so.enable_nvme = true;
  so.nvme.dir = dir.path();
  auto store = TieredStore::Create(so);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto comm = MakeSingleRankCommunicator();
  auto dev = MakeHostDevice(comm.get());
  StepStats bytes;
  BlockInputStash stash(*dev, store->get(), BlockInputsAt::kNvme, 4, 2, &bytes);
  std::vector<torch::Tensor> want, kept;
  for (int b = 0; b < 3; ++b)
    for (size_t p = 0; p < 2; ++p) {
      torch::Tensor x = torch::randn({3, 5, 7});
      want.push_back(x.clone());
      ASSERT_TRUE(stash.Keep(b, p, &x).ok());
      EXPECT_EQ(x.defined(), b == 0);  // block 0's input (the tokens) stays
      kept.push_back(x);
    }
  EXPECT_EQ(bytes.block_inputs_written, 4u * 3 * 5 * 7 * 4);
  ASSERT_TRUE(stash.WaitForWrites().ok());  // the writes land
  for (int b = 2; b >= 1; --b)
    for (size_t p = 0; p < 2; ++p) {
      torch::Tensor back;
      ASSERT_TRUE(stash.Fetch(b, p, &back).ok());
      EXPECT_TRUE(torch::equal(back, want[static_cast<size_t>(b) * 2 + p])) << b << "," << p;
    }
  EXPECT_EQ(bytes.block_inputs_read, bytes.block_inputs_written);
  // A stash of the next step (the extents now free): once its write has landed, an input
  // leaves memory while the forward goes on (at the next Keep).
  StepStats more;
  BlockInputStash forward(*dev, store->get(), BlockInputsAt::kNvme, 4, 1, &more);
  torch::Tensor first = torch::randn({3, 5, 7}), second = torch::randn({3, 5, 7});
  const torch::Tensor alias = first;
  ASSERT_TRUE(forward.Keep(1, 0, &first).ok());
  EXPECT_GT(alias.use_count(), 1);  // held while its write is in flight
  ASSERT_TRUE(forward.WaitForWrites().ok());
  EXPECT_GT(alias.use_count(), 1);  // (landed, still held: the next Keep lets go of it)
  ASSERT_TRUE(forward.Keep(2, 0, &second).ok());
  EXPECT_EQ(alias.use_count(), 1);
}

}  // namespace
}  // namespace strata
