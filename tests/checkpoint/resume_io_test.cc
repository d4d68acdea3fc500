// What a resume moves: a checkpoint of a run whose fp32 master is kept in its working weights
// (fp32 compute), with several optimizer sub-groups per block, restores by writing each stored
// tensor once and reading nothing back from NVMe, and the run goes on bitwise.
#include <gtest/gtest.h>

#include <optional>

#include "engine/engine_test_util.h"
#include "src/checkpoint/checkpoint.h"
#include "strata/communicator.h"
#include "strata/trace.h"
#include "support/settled.h"

namespace strata {
namespace {

TEST(ResumeIo, EachBlocksWeightsAreWrittenOnceAndNothingIsRead) {
  testing::TempDir dir;
  TrainConfig c = testing::TinyConfig(dir.path());
  c.offload_param.device = c.offload_optimizer.device = Tier::kNvme;
  c.sub_group_size = 3000;  // several sub-groups, so several masters, per block
  auto data = data::TokenDataset::Open(c.data, c.model.vocab_size, c.model.seq_len);
  ASSERT_TRUE(data.ok());
  auto comm = MakeSingleRankCommunicator();
  std::unique_ptr<Engine> a = testing::MakeEngine(c, comm.get());
  ASSERT_TRUE(a->plan().format.master() == MasterFormat::kInWorking);
  for (int s = 0; s < 2; ++s) ASSERT_TRUE(a->Step(s, **data).ok());
  const std::string ck = dir.path() + "/ck";
  ASSERT_TRUE(ckpt::SaveCheckpoint(*a, *comm, c, ck, 2).ok());

  Tracer tracer;
  auto b = Engine::Create(testing::Settled(c, comm->world_size()), comm.get(), &tracer);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const double t0 = tracer.Now();
  auto step = ckpt::LoadCheckpoint(**b, *comm, c, ck);
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  EXPECT_EQ(*step, 2);
  EXPECT_EQ(tracer.Bytes(Track::kNvmeRead, t0), 0u);
  const testing::StateBytes restored = testing::VisitAll(**b);  // writes the last block first (no more)
  EXPECT_TRUE(restored == testing::VisitAll(*a));
  uint64_t stored = 0;  // every tensor but the masters (they are the working weights)
  for (const auto& [name, bytes] : restored)
    if (const std::optional<TensorKey> key = TensorKey::Parse(name); key && key->role != TensorRole::kMaster)
      stored += bytes.size();
  EXPECT_EQ(tracer.Bytes(Track::kNvmeWrite, t0), stored);
  auto x = a->Step(2, **data), y = (*b)->Step(2, **data);
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_EQ(x->loss, y->loss);
}

}  // namespace
}  // namespace strata
