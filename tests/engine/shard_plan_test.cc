// ShardPlan, the pure function at the centre (what the engine allocates and the estimator adds
// up), and the StateFormat it carries: every rank's ranges tile each block, sub-groups tile
// each optimizer range, the keys and their bytes add up to the ledger, placement follows the
// offload settings and host blocks, the visits are the step's order, and the formats' bytes
// and conversions hold. No engine, no LibTorch.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>

#include "src/config/train_config.h"
#include "src/engine/shard_plan.h"

namespace strata {
namespace {

// A plan's config: as written, with nothing settled (recompute, no device accumulation).
SettledConfig Config(const std::string& extra = "") {
  auto c = ParseTrainConfig(R"({"train_micro_batch_size_per_gpu": 2,
      "zero_optimization": {"stage": 3, "sub_group_size": 1000},
      "strata": {"model": {"arch": "gpt2", "vocab_size": 64, "seq_len": 16, "n_layer": 2, "d_model": 16,
                           "n_head": 2})" + extra + "}}", "test");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return SettledConfig(*c);
}

ModelShape Shape(std::vector<int64_t> numels) {
  ModelShape s;
  s.block_numels = std::move(numels);
  return s;
}

TEST(ShardPlan, EveryRanksRangesTileEachBlockAtEveryStage) {
  const ModelShape shape = Shape({1000, 5003, 64, 7});
  for (int stage : {0, 1, 2, 3}) {
    for (int world : {1, 2, 3, 4}) {
      SettledConfig c = Config();
      c.zero_stage = stage;
      std::vector<ShardPlan> plans;
      for (int r = 0; r < world; ++r) plans.push_back(ShardPlan::Make(c, shape, world, r));
      for (size_t b = 0; b < shape.block_numels.size(); ++b) {
        SCOPED_TRACE(::testing::Message() << "stage " << stage << ", world " << world << ", block " << b);
        const ShardLayout& l = plans[0].blocks[b].layout;
        EXPECT_GE(l.padded, shape.block_numels[b]);
        EXPECT_EQ(l.shard % kShardAlign, 0);
        EXPECT_EQ(l.padded, l.shard * world);
        // Sharded ranges: disjoint and together [0, padded); unsharded ones: the whole group.
        int64_t working = 0, optimizer = 0, grad = 0;
        for (int r = 0; r < world; ++r) {
          const BlockPlan& bp = plans[r].blocks[b];
          EXPECT_EQ(bp.working.len, stage == 3 ? l.shard : l.padded);
          EXPECT_EQ(bp.optimizer.len, stage >= 1 ? l.shard : l.padded);
          EXPECT_EQ(bp.grad.len, stage >= 2 ? l.shard : l.padded);
          if (stage >= 1) {
            EXPECT_EQ(bp.optimizer.begin, r * l.shard);
          }
          working += bp.working.len;
          optimizer += bp.optimizer.len;
          grad += bp.grad.len;
        }
        EXPECT_EQ(working, stage == 3 ? l.padded : world * l.padded);
        EXPECT_EQ(optimizer, stage >= 1 ? l.padded : world * l.padded);
        EXPECT_EQ(grad, stage >= 2 ? l.padded : world * l.padded);
      }
    }
  }
}

TEST(ShardPlan, SubGroupsTileTheOptimizerRangeInAlignedSteps) {
  for (int64_t sub : {1, 64, 100, 1000, 1 << 20}) {
    SettledConfig c = Config();
    c.sub_group_size = sub;
    const ShardPlan p = ShardPlan::Make(c, Shape({5003, 130}), 2, 1);
    for (const BlockPlan& bp : p.blocks) {
      EXPECT_EQ(bp.sub_group_step % kShardAlign, 0) << sub;
      int64_t at = bp.optimizer.begin;
      for (int64_t i = 0; i < bp.num_sub_groups(); ++i) {
        const ElementRange r = bp.sub_group(i);
        EXPECT_EQ(r.begin, at);
        EXPECT_GT(r.len, 0);
        EXPECT_LE(r.len, bp.sub_group_step);
        at = r.end();
      }
      EXPECT_EQ(at, bp.optimizer.end()) << sub;
    }
  }
}

// The store's tensors, listed and counted alike, each named back, and their bytes the ledger's.
TEST(ShardPlan, KeysAndTheirBytesAreTheLedger) {
  for (const char* states : {"fp32", "bf16", "8bit"}) {
    SettledConfig c = Config();
    c.offload_param.device = Tier::kNvme;
    c.offload_optimizer.device = Tier::kNvme;
    SetAdamStates(&c, states);
    c.compute_dtype = DType::kBF16;
    const ShardPlan p = ShardPlan::Make(c, Shape({1000, 5003, 64}), 2, 0);
    const std::vector<TensorKey> keys = p.Keys();
    EXPECT_EQ(keys.size(), p.NumKeys());
    std::map<TensorRole, uint64_t> stored;
    for (const TensorKey& k : keys) {
      EXPECT_EQ(TensorKey::Parse(k.Name()), k) << k.Name();
      const int64_t len = k.role == TensorRole::kWorking ? p.blocks[k.block].working_tensor_len() : p.SubGroupLen(k);
      stored[k.role] += p.format.StoredBytes(k.role, len);
      EXPECT_EQ(p.TensorBytes(k), len * p.format.VisitedBytes(k.role));  // what checkpoints hold
    }
    EXPECT_EQ(stored[TensorRole::kWorking], p.ledger.At(StateKind::kWorking, Tier::kNvme)) << states;
    EXPECT_EQ(stored[TensorRole::kMaster], p.ledger.At(StateKind::kMaster, Tier::kNvme)) << states;
    EXPECT_EQ(stored[TensorRole::kAdamM], p.ledger.At(StateKind::kAdamM, Tier::kNvme)) << states;
    EXPECT_EQ(stored[TensorRole::kAdamV], p.ledger.At(StateKind::kAdamV, Tier::kNvme)) << states;
  }
}

TEST(ShardPlan, PlacementFollowsTheOffloadSettingsAndHostBlocks) {
  SettledConfig c = Config();
  c.offload_param.device = Tier::kNvme;
  c.offload_optimizer.device = Tier::kNvme;
  c.host_blocks = 2;
  const ShardPlan p = ShardPlan::Make(c, Shape({1000, 1000, 1000, 1000}), 1, 0);
  for (int b = 0; b < 4; ++b) {
    const Tier want = b < 2 ? Tier::kCpu : Tier::kNvme;
    EXPECT_EQ(p.OptimizerTier(b), want) << b;
    EXPECT_EQ(p.WorkingTier(b), want) << b;  // host blocks keep their working weights too
  }
  c.optimizer_overlap = OptimizerOverlap::kDelayed;  // which needs the old weights on NVMe
  const ShardPlan d = ShardPlan::Make(c, Shape({1000, 1000, 1000, 1000}), 1, 0);
  EXPECT_EQ(d.OptimizerTier(0), Tier::kCpu);
  EXPECT_EQ(d.WorkingTier(0), Tier::kNvme);
  EXPECT_GT(d.park_pool.count, 0u);
  c.offload_optimizer.device = Tier::kCpu;
  c.host_blocks = 0;
  c.optimizer_overlap = OptimizerOverlap::kForward;
  const ShardPlan cpu = ShardPlan::Make(c, Shape({1000}), 1, 0);
  EXPECT_EQ(cpu.OptimizerTier(0), Tier::kCpu);
  EXPECT_EQ(cpu.optim_pool.count, 0u);  // no NVMe states: no pool for them
  EXPECT_GT(cpu.param_pool.count, 0u);  // NVMe working weights: fetched through it
}

// The CPU Adam updates the states in place: off the host, offload_optimizer "none" keeps them
// in host memory as "cpu" does, and the ledger (so the estimate) says so. Found on the first
// GPU run, whose ledger put 81 GB of states in device memory that the process held itself.
TEST(ShardPlan, OffTheHostOptimizerStatesOfNoneLiveInHostMemory) {
  SettledConfig c = Config();
  c.offload_optimizer.device = Tier::kDevice;
  const ShardPlan host = ShardPlan::Make(c, Shape({1000, 1000}), 1, 0);
  EXPECT_EQ(host.OptimizerTier(0), Tier::kDevice);  // the host is the device
  const ShardPlan gpu = ShardPlan::Make(c, Shape({1000, 1000}), 1, 0, {.host = false});
  for (int b = 0; b < 2; ++b) EXPECT_EQ(gpu.OptimizerTier(b), Tier::kCpu) << b;
  c.offload_optimizer.device = Tier::kCpu;
  const ShardPlan gpu_cpu = ShardPlan::Make(c, Shape({1000, 1000}), 1, 0, {.host = false});
  EXPECT_TRUE(gpu.ledger == gpu_cpu.ledger);  // "none" is "cpu" there, byte for byte
  for (StateKind k : {StateKind::kMaster, StateKind::kAdamM, StateKind::kAdamV}) {
    EXPECT_EQ(gpu.ledger.At(k, Tier::kDevice), 0u);
    EXPECT_GT(gpu.ledger.At(k, Tier::kCpu), 0u);
  }
  EXPECT_EQ(OptimizerStatesWhere(Tier::kDevice, /*host_device=*/true), "none");
  EXPECT_NE(OptimizerStatesWhere(Tier::kDevice, /*host_device=*/false).find("host memory"), std::string::npos);
}

TEST(ShardPlan, VisitsAreTheStepsOrderOfGathers) {
  SettledConfig c = Config();
  ModelShape tied = Shape({100, 100, 100, 100});
  tied.tied_owner = 0;
  tied.tied_numel = 50;
  const ShardPlan host = ShardPlan::Make(c, tied, 1, 0, {.host = true});
  std::vector<std::pair<int, bool>> got;
  for (const Visit& v : host.Visits(2, /*backward=*/true)) got.push_back({v.block, v.tied});
  const std::vector<std::pair<int, bool>> one = {{0, true}, {1, false}, {2, false}, {3, false},
                                                 {2, false}, {1, false}, {0, false}};
  std::vector<std::pair<int, bool>> two = one;
  two.insert(two.end(), one.begin(), one.end());
  EXPECT_EQ(got, two);
  got.clear();
  for (const Visit& v : host.Visits(1, /*backward=*/false)) got.push_back({v.block, v.tied});
  EXPECT_EQ(got, (std::vector<std::pair<int, bool>>{{0, true}, {1, false}, {2, false}, {3, false}}));
}

TEST(ShardPlan, SpeculationTakesTheLastBlocksWithinItsBudget) {
  SettledConfig c = Config();
  c.optimizer_overlap = OptimizerOverlap::kSpeculative;
  c.speculation_budget_mb = 0;
  EXPECT_EQ(ShardPlan::Make(c, Shape({1 << 20, 1 << 20, 1 << 20}), 1, 0).speculative,
            (std::vector<bool>{false, false, false}));
  c.speculation_budget_mb = -1;  // "auto": all
  EXPECT_EQ(ShardPlan::Make(c, Shape({1 << 20, 1 << 20, 1 << 20}), 1, 0).speculative,
            (std::vector<bool>{true, true, true}));
  const ShardPlan one = ShardPlan::Make(c, Shape({1 << 20}), 1, 0);
  c.speculation_budget_mb = static_cast<int64_t>(one.SpeculationBackupBytes(0) * 2 >> 20);
  EXPECT_EQ(ShardPlan::Make(c, Shape({1 << 20, 1 << 20, 1 << 20}), 1, 0).speculative,
            (std::vector<bool>{false, true, true}));
}

TEST(ShardPlan, TheFormatsSettleFromTheConfigAndTheirNeedsAreChecked) {
  SettledConfig c = Config();
  c.offload_param.device = Tier::kCpu;
  EXPECT_EQ(ShardPlan::Make(c, Shape({1000}), 1, 0).format.master(), MasterFormat::kInWorking);  // fp32 compute
  c.optimizer_overlap = OptimizerOverlap::kSpeculative;  // keeps two versions of the weights
  EXPECT_EQ(ShardPlan::Make(c, Shape({1000}), 1, 0).format.master(), MasterFormat::kFp32);
  c.optimizer_overlap = OptimizerOverlap::kForward;
  c.split_master = true;
  const ShardPlan fp32 = ShardPlan::Make(c, Shape({1000}), 1, 0);
  EXPECT_EQ(fp32.format.master(), MasterFormat::kSplit);
  EXPECT_NE(fp32.CheckFormats(c).message().find("needs bf16 compute"), std::string::npos);
  c.compute_dtype = DType::kBF16;
  EXPECT_TRUE(ShardPlan::Make(c, Shape({1000}), 1, 0).CheckFormats(c).ok());
  c.offload_param.device = Tier::kDevice;  // on a device, resident: the CPU update cannot read them
  const ShardPlan resident = ShardPlan::Make(c, Shape({1000}), 1, 0, {.host = false});
  EXPECT_NE(resident.CheckFormats(c).message().find("on the device"), std::string::npos);
}

TEST(StateFormat, StoredAndVisitedBytes) {
  const StateFormat split(MasterFormat::kSplit, MomentFormat::kBf16, DType::kBF16);
  EXPECT_EQ(split.StoredBytes(TensorRole::kMaster, 100), 200u);
  EXPECT_EQ(split.VisitedBytes(TensorRole::kMaster), 4u);  // checkpoints see the fp32 master
  EXPECT_EQ(split.StoredBytes(TensorRole::kAdamM, 100), 200u);
  EXPECT_EQ(split.VisitedBytes(TensorRole::kAdamV), 2u);
  EXPECT_EQ(split.FirstStoredState(), 0);
  const StateFormat in_working(MasterFormat::kInWorking, MomentFormat::k8Bit, DType::kF32);
  EXPECT_EQ(in_working.StoredBytes(TensorRole::kMaster, 100), 0u);
  EXPECT_EQ(in_working.FirstStoredState(), 1);
  EXPECT_EQ(in_working.StoredBytes(TensorRole::kAdamM, 512), Moment8BitBytes(512));
  EXPECT_EQ(in_working.VisitedBytes(TensorRole::kAdamM), 4u);  // their fp32 values
  EXPECT_STREQ(in_working.MomentsName(), "8bit");
  EXPECT_EQ(in_working.VisitedMomentDType(), DType::kF32);
}

// What a checkpoint holds comes back as what the store held: the master through the working
// weights and low halves, 8-bit moments through their fp32 values.
TEST(StateFormat, CheckpointViewsRoundTrip) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 0.02f);
  std::vector<float> master(300);
  for (float& x : master) x = normal(rng);
  const StateFormat split(MasterFormat::kSplit, MomentFormat::kFp32, DType::kBF16);
  std::vector<std::byte> working(master.size() * 2), low(split.StoredBytes(TensorRole::kMaster, master.size()));
  split.WriteMaster(master, working, low);
  std::vector<float> back(master.size());
  split.ReadMaster(working, low, back);
  EXPECT_EQ(back, master);
  const StateFormat eight(MasterFormat::kFp32, MomentFormat::k8Bit, DType::kBF16);
  std::vector<float> v(512);
  for (float& x : v) x = std::abs(normal(rng)) * 1e-3f;
  const std::vector<std::byte> blob =
      eight.Restore(TensorRole::kAdamV, std::as_bytes(std::span(v)), static_cast<int64_t>(v.size()));
  EXPECT_EQ(blob.size(), Moment8BitBytes(v.size()));
  const std::vector<std::byte> seen = eight.Visit(TensorRole::kAdamV, blob, static_cast<int64_t>(v.size()));
  EXPECT_EQ(eight.Restore(TensorRole::kAdamV, seen, static_cast<int64_t>(v.size())), blob);  // a fixed point
}

}  // namespace
}  // namespace strata
