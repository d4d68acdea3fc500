// fp32 compute stores the fp32 master once, as the working weights (MasterFormat::kInWorking):
// the update reads the weights it replaces and writes them back, no master tensor beside them.
// The run is bitwise the run with a master of its own (the speculative update keeps one, and is
// exact), wherever the state lives and however it is sharded; checkpoints still see a master.
#include <gtest/gtest.h>

#include "strata/communicator.h"
#include "tests/engine/engine_test_util.h"
#include "support/settled.h"

namespace strata {
namespace {

using testing::RunEngine;
using testing::TempDir;
using testing::TinyConfig;

// A master of its own: the speculative update (exact: redone when the clip applies) keeps one.
TrainConfig OwnMaster(TrainConfig c) {
  c.optimizer_overlap = OptimizerOverlap::kSpeculative;
  return c;
}

TEST(MasterInWorking, TrainsBitwiseAsAMasterOfItsOwnWhereverTheStateLives) {
  TempDir dir;
  TrainConfig base = TinyConfig(dir.path());  // fp32 compute
  base.model.n_layer = 3;
  struct Home {
    Tier params, states;
    int64_t host_blocks;
  };
  for (const Home& h : {Home{Tier::kNvme, Tier::kNvme, 0}, Home{Tier::kNvme, Tier::kNvme, 2},
                        Home{Tier::kCpu, Tier::kNvme, 0}, Home{Tier::kDevice, Tier::kDevice, 0}}) {
    SCOPED_TRACE(::testing::Message() << "params " << OffloadDeviceName(h.params) << ", states "
                                      << OffloadDeviceName(h.states) << ", host blocks " << h.host_blocks);
    TrainConfig c = base;
    c.offload_param.device = h.params;
    c.offload_optimizer.device = h.states;
    c.host_blocks = h.host_blocks;
    for (OptimizerOverlap mode : {OptimizerOverlap::kForward, OptimizerOverlap::kNone}) {
      c.optimizer_overlap = mode;
      const testing::RunResult own = RunEngine(OwnMaster(c), 1, 4), once = RunEngine(c, 1, 4);
      ASSERT_EQ(once.stats.size(), 4u);
      for (int s = 0; s < 4; ++s) EXPECT_EQ(once.stats[s].loss, own.stats[s].loss) << "step " << s;
      EXPECT_TRUE(testing::BitwiseEqual(own, once)) << testing::MaxAbsDiff(own, once);
      EXPECT_TRUE(own.state == once.state) << "working weights, master (as visited), m or v differ";
      // No master tensor; the rest as before.
      EXPECT_EQ(once.ledger.Of(StateKind::kMaster), 0u);
      EXPECT_EQ(own.ledger.Of(StateKind::kMaster), own.ledger.Of(StateKind::kAdamM));  // fp32, over the same range
      EXPECT_EQ(once.ledger.Of(StateKind::kWorking), own.ledger.Of(StateKind::kWorking));
      EXPECT_EQ(once.ledger.Of(StateKind::kAdamV), own.ledger.Of(StateKind::kAdamV));
      EXPECT_LT(once.stats.back().loss, once.stats.front().loss);
    }
  }
}

// Two ranks: stage 2 keeps whole working weights on each rank and updates a part in place
// (then shared); stage 3 updates each rank's shard.
TEST(MasterInWorking, ShardsAsAMasterOfItsOwn) {
  TempDir dir;
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE(stage);
    TrainConfig c = TinyConfig(dir.path());
    c.zero_stage = stage;
    c.offload_optimizer.device = Tier::kNvme;
    if (stage == 3) c.offload_param.device = Tier::kNvme;
    const testing::RunResult own = RunEngine(OwnMaster(c), 2, 3), once = RunEngine(c, 2, 3);
    ASSERT_EQ(once.stats.size(), 3u);
    EXPECT_TRUE(testing::BitwiseEqual(own, once)) << testing::MaxAbsDiff(own, once);
    EXPECT_TRUE(own.state == once.state);
    EXPECT_EQ(once.ledger.Of(StateKind::kMaster), 0u);
  }
}

// What VisitState gives (a checkpoint) restores into either layout and goes on bitwise.
TEST(MasterInWorking, StateRestoresIntoEitherLayout) {
  TempDir dir;
  TrainConfig c = TinyConfig(dir.path());
  c.offload_param.device = c.offload_optimizer.device = Tier::kNvme;
  c.sub_group_size = 3000;  // several sub-groups per block: each restores its part of the working weights
  auto data = data::TokenDataset::Open(c.data, c.model.vocab_size, c.model.seq_len);
  ASSERT_TRUE(data.ok());
  auto comm = MakeSingleRankCommunicator();
  auto make = [&](const TrainConfig& k) { return testing::MakeEngine(k, comm.get()); };
  for (bool from_own : {false, true}) {
    SCOPED_TRACE(from_own ? "from a master of its own" : "from the master in the working weights");
    std::unique_ptr<Engine> a = make(from_own ? OwnMaster(c) : c);
    ASSERT_EQ(a->plan().format.master() == MasterFormat::kInWorking, !from_own);
    for (int s = 0; s < 2; ++s) ASSERT_TRUE(a->Step(s, **data).ok());
    const testing::StateBytes saved = testing::VisitAll(*a);
    for (const TrainConfig& into : {c, OwnMaster(c)}) {
      std::unique_ptr<Engine> b = make(into);
      testing::RestoreAll(*b, saved);
      b->set_counters(a->counters());
      EXPECT_TRUE(testing::VisitAll(*b) == saved);
    }
    std::unique_ptr<Engine> b = make(from_own ? c : OwnMaster(c));
    testing::RestoreAll(*b, saved);
    b->set_counters(a->counters());
    for (int s = 2; s < 4; ++s) {
      auto x = a->Step(s, **data), y = b->Step(s, **data);
      ASSERT_TRUE(x.ok() && y.ok());
      EXPECT_EQ(x->loss, y->loss) << s;
    }
    EXPECT_TRUE(testing::VisitAll(*a) == testing::VisitAll(*b));
  }
}

// Restoring a block of many sub-groups writes its working weights once, not once per sub-group
// (the masters are patched into them in memory), and the state is the checkpoint's.
TEST(MasterInWorking, RestoreWritesEachBlocksWeightsOnce) {
  TempDir dir;
  TrainConfig c = TinyConfig(dir.path());
  c.offload_param.device = c.offload_optimizer.device = Tier::kNvme;
  c.sub_group_size = 3000;
  auto data = data::TokenDataset::Open(c.data, c.model.vocab_size, c.model.seq_len);
  ASSERT_TRUE(data.ok());
  auto comm = MakeSingleRankCommunicator();
  std::unique_ptr<Engine> a = testing::MakeEngine(c, comm.get());
  ASSERT_TRUE(a->Step(0, **data).ok());
  const testing::StateBytes saved = testing::VisitAll(*a);
  uint64_t stored = 0;  // what the store holds: every tensor but the masters (they are the weights)
  int masters = 0;
  for (const auto& [name, bytes] : saved) {
    const std::optional<TensorKey> key = TensorKey::Parse(name);
    ASSERT_TRUE(key) << name;
    if (key->role == TensorRole::kMaster) ++masters;
    else stored += bytes.size();
  }
  ASSERT_GT(masters, 2 * static_cast<int>(a->plan().blocks.size()));  // several sub-groups per block
  Tracer tracer;
  auto b = Engine::Create(testing::Settled(c, comm->world_size()), comm.get(), &tracer);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const double t0 = tracer.Now();
  testing::RestoreAll(**b, saved);
  (*b)->set_counters(a->counters());
  EXPECT_TRUE(testing::VisitAll(**b) == saved);  // (flushes the last block's weights first)
  EXPECT_EQ(tracer.Bytes(Track::kNvmeWrite, t0), stored);
  auto x = a->Step(1, **data), y = (*b)->Step(1, **data);
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_EQ(x->loss, y->loss);
}

// Only where the working weights are the master and one update replaces them in one place.
TEST(MasterInWorking, OnlyWhereTheUpdateReplacesFp32WeightsInPlace) {
  TempDir dir;
  const TrainConfig c = TinyConfig(dir.path());
  const ModelShape shape = ModelShape::Of(c.model);
  auto in_working = [&](const TrainConfig& k, DeviceTraits device = {}) {
    return ShardPlan::Make(SettledConfig(k), shape, 1, 0, device).format.master() == MasterFormat::kInWorking;
  };
  EXPECT_TRUE(in_working(c));
  TrainConfig k = c;
  k.compute_dtype = DType::kBF16;
  EXPECT_FALSE(in_working(k));  // the master is not the working weights
  k.split_master = true;
  EXPECT_FALSE(in_working(k));  // (its low halves)
  for (OptimizerOverlap mode : {OptimizerOverlap::kSpeculative, OptimizerOverlap::kDelayed}) {
    k = c;
    k.optimizer_overlap = mode;  // two versions of the weights at once
    EXPECT_FALSE(in_working(k)) << OptimizerOverlapName(mode);
  }
  k = c;
  k.model.lora.r = 4;
  EXPECT_FALSE(in_working(k));
  k = c;  // off the host, offload_param "none": working weights resident on the device
  EXPECT_FALSE(in_working(k, {.host = false}));
  k.offload_param.device = Tier::kCpu;
  EXPECT_TRUE(in_working(k, {.host = false}));
  k.resident_blocks = 1;
  EXPECT_FALSE(in_working(k, {.host = false}));
}

}  // namespace
}  // namespace strata
