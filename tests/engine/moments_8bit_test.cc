// strata.adam_states "8bit" (Note [8-bit moments], strata/cpu_adam.h): m and v stored as
// 8-bit blobs wherever the states live, counted by the ledger, visited (checkpoints) as fp32
// and restored from fp32, and a run that learns as the fp32-moment one.
#include <gtest/gtest.h>

#include "engine/engine_test_util.h"
#include "strata/communicator.h"
#include "strata/cpu_adam.h"

namespace strata {
namespace {

using testing::TempDir;
using testing::TinyConfig;

TrainConfig EightBit(const std::string& dir) {
  TrainConfig c = TinyConfig(dir);
  c.moments_8bit = true;
  c.sub_group_size = 5120;  // a multiple of the 256-element blocks: every home cuts the same blocks
  return c;
}

// The same blobs and weights whether the states are in the cpu tier, on NVMe or in host
// blocks, under the overlapped or the plain schedule; the ledger holds Moment8BitBytes per
// sub-group; the run's losses stay near the fp32-moment run's (the same data and seed).
TEST(Moments8Bit, TrainAlikeWhereverTheStatesLive) {
  TempDir dir;
  struct Home {
    Tier params, states;
    int64_t host_blocks;
    OptimizerOverlap overlap;
  };
  std::vector<testing::RunResult> runs;
  for (const Home& h : {Home{Tier::kDevice, Tier::kCpu, 0, OptimizerOverlap::kForward},
                        Home{Tier::kNvme, Tier::kNvme, 0, OptimizerOverlap::kForward},
                        Home{Tier::kNvme, Tier::kNvme, 1, OptimizerOverlap::kNone}}) {
    TrainConfig c = EightBit(dir.path());
    c.offload_param.device = h.params;
    c.offload_optimizer.device = h.states;
    c.host_blocks = h.host_blocks;
    c.optimizer_overlap = h.overlap;
    runs.push_back(testing::RunEngine(c, 1, 6));
  }
  for (size_t i = 1; i < runs.size(); ++i) {
    EXPECT_TRUE(testing::BitwiseEqual(runs[0], runs[i])) << i << ": max diff " << testing::MaxAbsDiff(runs[0], runs[i]);
    EXPECT_TRUE(runs[0].state == runs[i].state) << i;
  }
  // 8-bit moments: the ledger's bytes are the blobs' (n codes padded to 64, a scale per 256).
  const MemoryLedger& l = runs[1].ledger;
  uint64_t elements = 0, blobs = 0;
  for (const auto& [name, bytes] : runs[1].state) {
    const std::optional<TensorKey> k = TensorKey::Parse(name);
    if (k && k->role == TensorRole::kAdamM) {
      elements += bytes.size() / 4;  // visited as fp32
      blobs += Moment8BitBytes(bytes.size() / 4);
    }
  }
  EXPECT_EQ(l.Of(StateKind::kAdamM), blobs);
  EXPECT_EQ(l.Of(StateKind::kAdamV), blobs);
  EXPECT_LT(blobs, elements * 11 / 10);
  TrainConfig fp32 = TinyConfig(dir.path());
  fp32.sub_group_size = 5120;
  const testing::RunResult reference = testing::RunEngine(fp32, 1, 6);
  for (size_t s = 0; s < reference.stats.size(); ++s)
    EXPECT_NEAR(runs[0].stats[s].loss, reference.stats[s].loss, 0.02 * reference.stats[s].loss) << "step " << s;
  EXPECT_LT(runs[0].stats.back().loss, runs[0].stats.front().loss);
  // Two ranks (each encodes its own range's blocks): the same learning.
  const testing::RunResult two = testing::RunEngine(EightBit(dir.path()), 2, 6);
  const testing::RunResult two_fp32 = testing::RunEngine(fp32, 2, 6);
  for (size_t s = 0; s < two_fp32.stats.size(); ++s)
    EXPECT_NEAR(two.stats[s].loss, two_fp32.stats[s].loss, 0.02 * two_fp32.stats[s].loss) << "2 ranks, step " << s;
}

// Visited as fp32 values and restored from them: a restored engine holds the same blobs
// (VisitState gives the same bytes) and continues bitwise; an fp32-moment engine takes the
// same state, and its states restore into an 8-bit engine (encoded then).
TEST(Moments8Bit, VisitAsFp32AndRestoreToTheSameBlobs) {
  TempDir dir;
  TrainConfig c = EightBit(dir.path());
  c.offload_param.device = c.offload_optimizer.device = Tier::kNvme;
  auto data = data::TokenDataset::Open(c.data, c.model.vocab_size, c.model.seq_len);
  ASSERT_TRUE(data.ok());
  auto comm = MakeSingleRankCommunicator();
  auto make = [&](const TrainConfig& k) { return testing::MakeEngine(k, comm.get()); };
  std::unique_ptr<Engine> a = make(c);
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(a->Step(s, **data).ok());
  const testing::StateBytes saved = testing::VisitAll(*a);
  std::unique_ptr<Engine> b = make(c);
  testing::RestoreAll(*b, saved);
  b->set_counters(a->counters());
  EXPECT_TRUE(testing::VisitAll(*b) == saved);
  for (int s = 3; s < 5; ++s) {
    auto x = a->Step(s, **data), y = b->Step(s, **data);
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_EQ(x->loss, y->loss) << s;
  }
  EXPECT_TRUE(testing::VisitAll(*a) == testing::VisitAll(*b));
  TrainConfig fp32 = c;
  fp32.moments_8bit = false;
  std::unique_ptr<Engine> f = make(fp32);
  testing::RestoreAll(*f, saved);
  const testing::StateBytes as_fp32 = testing::VisitAll(*f);
  EXPECT_TRUE(as_fp32 == saved);  // the values the blobs hold, exactly
  std::unique_ptr<Engine> back = make(c);
  testing::RestoreAll(*back, as_fp32);
  EXPECT_TRUE(testing::VisitAll(*back) == saved);
  EXPECT_FALSE(back->RestoreState(*TensorKey::Parse(saved.rbegin()->first), std::vector<std::byte>(12)).ok());
}

// The optimizer pool's buffers hold the widest stored state of a sub-group: with the master in
// the (fp32) working weights and 8-bit moments that is a blob, a quarter of an fp32 state.
TEST(Moments8Bit, ShrinkTheOptimizerPoolsBuffers) {
  TempDir dir;
  auto comm = MakeSingleRankCommunicator();
  auto buffer = [&](bool eight, bool own_master) {
    TrainConfig c = EightBit(dir.path());
    c.moments_8bit = eight;
    c.offload_param.device = c.offload_optimizer.device = Tier::kNvme;
    if (own_master) c.optimizer_overlap = OptimizerOverlap::kDelayed;  // (keeps a master of its own)
    const std::unique_ptr<Engine> e = testing::MakeEngine(c, comm.get());
    EXPECT_EQ(e->plan().format.master() == MasterFormat::kInWorking, !own_master);
    return e->plan().optim_pool.buffer_bytes;
  };
  const size_t sub_group = 5120;
  EXPECT_EQ(buffer(true, false), 8192u);  // Moment8BitBytes(5120) = 5200, to a page
  EXPECT_EQ(buffer(false, false), sub_group * 4);  // fp32 moments
  EXPECT_EQ(buffer(true, true), sub_group * 4);    // an fp32 master of its own
}

// The speculative update backs states up by fixed bytes per element: refused, naming the keys.
TEST(Moments8Bit, AreRefusedWithTheSpeculativeUpdate) {
  auto c = ParseTrainConfig(R"({"train_micro_batch_size_per_gpu": 1,
      "strata": {"adam_states": "8bit", "optimizer_overlap": "speculative"}})", "test");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("strata.adam_states \"8bit\""), std::string::npos) << c.status().ToString();
  EXPECT_NE(c.status().message().find("speculative"), std::string::npos) << c.status().ToString();
  auto ok = ParseTrainConfig(R"({"train_micro_batch_size_per_gpu": 1, "strata": {"adam_states": "8bit"}})", "test");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(ok->moments_8bit);
  EXPECT_EQ(ok->adam_states, DType::kF32);  // what checkpoints hold
  auto bad = ParseTrainConfig(R"({"train_micro_batch_size_per_gpu": 1, "strata": {"adam_states": "int4"}})", "test");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("8bit"), std::string::npos) << bad.status().ToString();
}

}  // namespace
}  // namespace strata
