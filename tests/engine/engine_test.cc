// The engine's "Done when" checks (issue 4), on the CPU with ranks as threads:
//  (a) offload none / cpu / nvme give bitwise identical weights after 5 steps;
//  (b) 1 rank and 2 ranks agree, and so do gradient accumulation 2 x B/2 and 1 x B;
//  (c) a plain LibTorch loop (torch::optim::AdamW, no sharding) agrees with Strata;
//  (d) fp16 skips a step with a planted overflow and recovers;
// plus every ZeRO stage's per-rank bytes against the arithmetic, and the prefetch budget.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "src/model/model.h"
#include "strata/flat_group.h"
#include "tests/engine/engine_test_util.h"
#include "support/settled.h"

namespace strata {
namespace {

using testing::RunEngine;
using testing::TempDir;
using testing::TinyConfig;

TEST(Engine, OffloadNoneCpuNvmeAreBitwiseIdentical) {
  TempDir dir;
  std::vector<testing::RunResult> runs;
  for (Tier d : {Tier::kDevice, Tier::kCpu, Tier::kNvme}) {
    TrainConfig c = TinyConfig(dir.path());
    c.compute_dtype = DType::kBF16;
    c.offload_param.device = d;
    c.offload_optimizer.device = d;
    runs.push_back(RunEngine(c, 2, 5));
  }
  ASSERT_EQ(runs[0].stats.size(), 5u);
  EXPECT_TRUE(testing::BitwiseEqual(runs[0], runs[1])) << "none vs cpu: max diff " << testing::MaxAbsDiff(runs[0], runs[1]);
  EXPECT_TRUE(testing::BitwiseEqual(runs[0], runs[2])) << "none vs nvme: max diff " << testing::MaxAbsDiff(runs[0], runs[2]);
  for (int s = 0; s < 5; ++s) EXPECT_EQ(runs[0].stats[s].loss, runs[2].stats[s].loss) << "step " << s;
  // The NVMe run really moved bytes through the swap file.
  EXPECT_GT(runs[2].ledger.bytes[static_cast<int>(StateKind::kMaster)][static_cast<int>(Tier::kNvme)], 0u);
}

// strata.host_blocks: the first blocks' state stays in host memory (optimizer states, and the
// working weights except with the delayed update) while the rest is on NVMe. Every overlap
// mode trains bitwise as with all of it on NVMe, and the ledger puts each block's state where
// the key says; more than the model has keeps all.
TEST(Engine, HostBlocksTrainAsAllOnNvme) {
  TempDir dir;
  TrainConfig c = TinyConfig(dir.path());
  c.model.n_layer = 4;
  c.compute_dtype = DType::kBF16;
  c.sub_group_size = 20000;
  c.offload_param.device = c.offload_optimizer.device = Tier::kNvme;
  auto at = [](const testing::RunResult& r, StateKind k, Tier where) {
    return r.ledger.bytes[static_cast<int>(k)][static_cast<int>(where)];
  };
  for (OptimizerOverlap mode : {OptimizerOverlap::kNone, OptimizerOverlap::kForward, OptimizerOverlap::kSpeculative,
                                OptimizerOverlap::kDelayed}) {
    SCOPED_TRACE(::testing::Message() << "overlap mode " << static_cast<int>(mode));
    c.optimizer_overlap = mode;
    c.host_blocks = 0;
    const auto nvme = RunEngine(c, 2, 4);
    c.host_blocks = 3;
    const auto split = RunEngine(c, 2, 4);
    ASSERT_EQ(split.stats.size(), 4u);
    for (int s = 0; s < 4; ++s) EXPECT_EQ(split.stats[s].loss, nvme.stats[s].loss) << "step " << s;
    EXPECT_TRUE(testing::BitwiseEqual(nvme, split));
    EXPECT_TRUE(nvme.state == split.state) << "working weights, master, m or v differ";
    for (StateKind k : {StateKind::kMaster, StateKind::kWorking}) {
      const bool moves = k == StateKind::kMaster || mode != OptimizerOverlap::kDelayed;
      EXPECT_EQ(at(split, k, Tier::kCpu) > 0, moves) << (k == StateKind::kMaster ? "master" : "working");
      EXPECT_GT(at(split, k, Tier::kNvme), 0u) << (k == StateKind::kMaster ? "master" : "working");
      EXPECT_EQ(at(split, k, Tier::kCpu) + at(split, k, Tier::kNvme), at(nvme, k, Tier::kNvme));
    }
  }
  c.optimizer_overlap = OptimizerOverlap::kForward;
  c.host_blocks = 1000;
  const auto all = RunEngine(c, 2, 2);
  ASSERT_EQ(all.stats.size(), 2u);
  EXPECT_EQ(at(all, StateKind::kMaster, Tier::kNvme) + at(all, StateKind::kWorking, Tier::kNvme), 0u);
}

// Tolerance: fp32 compute; the sums of gradients over ranks and micro-batches associate
// differently (ring order vs one batch), so weights differ by rounding only: 2e-5 after 5
// steps with lr 2e-3 (a wrong gradient or a missed rank differs by > 1e-3).
TEST(Engine, OneRankAndTwoRanksAgree) {
  TempDir dir;
  TrainConfig one = TinyConfig(dir.path());
  one.grad_accum = 2;  // 1 rank x 2 micro-batches = the same samples as 2 ranks x 1
  TrainConfig two = TinyConfig(dir.path());
  auto a = RunEngine(one, 1, 5), b = RunEngine(two, 2, 5);
  EXPECT_LT(testing::MaxAbsDiff(a, b), 2e-5);
  for (int s = 0; s < 5; ++s) EXPECT_NEAR(a.stats[s].loss, b.stats[s].loss, 1e-5) << "step " << s;
}

TEST(Engine, GradientAccumulationMatchesOneLargeBatch) {
  // 2 micro-batches of B/2 and 1 of B see the same sequences (the data is a pure function
  // of the sequence number), so they agree within the rounding of the sums.
  TempDir dir;
  TrainConfig acc = TinyConfig(dir.path());
  acc.micro_batch = 2;
  acc.grad_accum = 2;
  TrainConfig big = TinyConfig(dir.path());
  big.micro_batch = 4;
  auto a = RunEngine(acc, 1, 3), b = RunEngine(big, 1, 3);
  EXPECT_LT(testing::MaxAbsDiff(a, b), 2e-5);
  for (int s = 0; s < 3; ++s) EXPECT_NEAR(a.stats[s].loss, b.stats[s].loss, 1e-5) << "step " << s;
}

// Tolerance: the same fp32 math in a different order (flattened groups, Strata's SIMD AdamW
// vs LibTorch's op-by-op AdamW): 1e-5 absolute after 5 steps at lr 2e-3.
class EngineVsLibTorch : public ::testing::TestWithParam<model::Arch> {};

TEST_P(EngineVsLibTorch, MatchesAPlainLibTorchLoop) {
  TempDir dir;
  TrainConfig c = TinyConfig(dir.path());
  c.zero_stage = 3;
  c.no_decay = std::vector<std::string>{};  // the loop decays every parameter
  if (GetParam() == model::Arch::kLlama) {  // grouped-query attention, untied head, NVMe states
    c.model.arch = model::Arch::kLlama;
    c.model.n_kv_head = 2;
    c.model.tie_embeddings = false;
    c.offload_param.device = Tier::kNvme;
    c.offload_optimizer.device = Tier::kNvme;
  }
  auto strata_run = RunEngine(c, 1, 5);

  model::ModelSpec spec(c.model);
  model::FullModel ref(spec);
  auto data = data::TokenDataset::Open(c.data, c.model.vocab_size, c.model.seq_len);
  ASSERT_TRUE(data.ok());
  torch::optim::AdamW opt(ref.parameters(), torch::optim::AdamWOptions(c.lr)
                                                .betas({c.beta1, c.beta2})
                                                .eps(c.eps)
                                                .weight_decay(c.weight_decay));
  for (int64_t s = 0; s < 5; ++s) {
    auto batch = (*data)->Get(data::Split::kTrain, static_cast<uint64_t>(s), c.micro_batch);
    opt.zero_grad();
    torch::Tensor loss = model::LanguageModelLoss(ref.Forward(batch.inputs), batch.targets);
    EXPECT_NEAR(loss.item<double>(), strata_run.stats[s].loss, 1e-4) << "step " << s;
    loss.backward();
    torch::nn::utils::clip_grad_norm_(ref.parameters(), c.gradient_clipping);
    opt.step();
  }
  double worst = 0;
  for (size_t b = 0; b < ref.blocks().size(); ++b) {
    auto params = ref.blocks()[b]->named_parameters();
    ASSERT_EQ(params.size(), strata_run.master[b].size()) << "block " << b;
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(params[i].key(), strata_run.master[b][i].first);
      worst = std::max(worst, (params[i].value().detach() - strata_run.master[b][i].second).abs().max().item<double>());
    }
  }
  EXPECT_LT(worst, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Archs, EngineVsLibTorch, ::testing::Values(model::Arch::kGpt2, model::Arch::kLlama),
                         [](const auto& info) { return info.param == model::Arch::kGpt2 ? "gpt2" : "llama"; });

// The path a GPU takes (working shards copied into a device buffer before the all-gather,
// gradients copied out after the reduce-scatter), driven on the host: bitwise the host path,
// for every stage (sharded and unsharded weights and gradients) and a tied model.
TEST(Engine, TheDevicePathDrivenOnTheHostIsBitwiseTheHostPath) {
  TempDir dir;
  for (int stage : {1, 3}) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage);
    TrainConfig c = TinyConfig(dir.path());
    c.zero_stage = stage;
    c.compute_dtype = DType::kBF16;
    c.offload_param.device = stage == 3 ? Tier::kNvme : Tier::kDevice;
    c.offload_optimizer.device = Tier::kCpu;
    auto host = RunEngine(c, 2, 3);
    const FakeDeviceOptions no_delays{.seed = 1, .max_delay_us = 0, .copy_gbps = 0, .poison = true};
    auto staged = RunEngine(c, 2, 3, &no_delays);
    ASSERT_EQ(host.stats.size(), 3u);
    for (int s = 0; s < 3; ++s) EXPECT_EQ(host.stats[s].loss, staged.stats[s].loss) << "step " << s;
    EXPECT_TRUE(testing::BitwiseEqual(host, staged));
  }
}

TEST(Engine, Fp16SkipsAPlantedOverflowAndRecovers) {
  TempDir dir;
  TrainConfig c = TinyConfig(dir.path());
  c.compute_dtype = DType::kF16;
  c.loss_scale.initial_scale_power = 10;
  c.loss_scale.hysteresis = 1;
  c.debug_overflow_step = 2;
  auto r = RunEngine(c, 2, 5);
  ASSERT_EQ(r.stats.size(), 5u);
  for (int s = 0; s < 5; ++s) EXPECT_EQ(r.stats[s].skipped, s == 2) << "step " << s;
  EXPECT_EQ(r.stats[2].loss_scale, 1024.0);
  EXPECT_EQ(r.stats[3].loss_scale, 512.0);  // halved after the overflow
  EXPECT_TRUE(std::isfinite(r.stats[4].loss));
  EXPECT_LT(r.stats[4].loss, r.stats[0].loss);

  // The skipped step left every state untouched: 2 steps == 3 steps with step 2 skipped.
  TrainConfig two = c;
  two.debug_overflow_step = -1;
  auto a = RunEngine(two, 2, 2);
  TrainConfig three = c;
  auto b = RunEngine(three, 2, 3);
  EXPECT_TRUE(testing::BitwiseEqual(a, b));
}

TEST(Engine, PerRankBytesOfEachStageMatchTheArithmetic) {
  TempDir dir;
  const int world = 2;
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage);
    TrainConfig c = TinyConfig(dir.path());
    c.zero_stage = stage;
    c.compute_dtype = DType::kBF16;
    auto r = RunEngine(c, world, 1);
    model::ModelSpec spec(c.model);
    uint64_t working = 0, optim = 0, grads = 0;
    for (int b = 0; b < spec.num_blocks(); ++b) {
      const ShardLayout l = MakeShardLayout(spec.block_parameters(b), world, 0);
      working += (stage == 3 ? l.shard : l.padded) * 2;   // bf16
      optim += (stage >= 1 ? l.shard : l.padded) * 4;     // fp32, each of master, m, v
      grads += (stage >= 2 ? l.shard : l.padded) * 4;     // fp32 accumulator
    }
    EXPECT_EQ(r.ledger.Of(StateKind::kWorking), working);
    EXPECT_EQ(r.ledger.Of(StateKind::kMaster), optim);
    EXPECT_EQ(r.ledger.Of(StateKind::kAdamM), optim);
    EXPECT_EQ(r.ledger.Of(StateKind::kAdamV), optim);
    EXPECT_EQ(r.ledger.Of(StateKind::kGradAccum), grads);
    // ZeRO's headline: per-parameter bytes shrink as promised (2 + 4 + 12 = 18 B at stage 0).
    const double psi = static_cast<double>(spec.num_parameters());
    const double per_param = (working + 3 * optim + grads) / psi;
    const double expected[] = {18.0, 2 + 4 + 12.0 / world, 2 + 16.0 / world, 18.0 / world};
    EXPECT_NEAR(per_param, expected[stage], 0.05 * expected[stage]);
  }
}

TEST(Engine, StagesTrainTheSameModel) {
  // Stages change where bytes live, not the math: within rounding of the reductions.
  TempDir dir;
  std::vector<testing::RunResult> runs;
  for (int stage = 0; stage <= 3; ++stage) {
    TrainConfig c = TinyConfig(dir.path());
    c.zero_stage = stage;
    runs.push_back(RunEngine(c, 2, 3));
  }
  for (int stage = 1; stage <= 3; ++stage) EXPECT_LT(testing::MaxAbsDiff(runs[0], runs[stage]), 2e-5) << stage;
}

// Adam's m and v in bf16 are rounded stochastically with bits from (step, block, position in
// the block's flat group), never from how the update is cut: other sub-group sizes (the
// kernel calls) and other homes give bitwise the same weights and moments.
TEST(Engine, Bf16MomentsRoundAlikeWhateverTheSubGroups) {
  TempDir dir;
  std::vector<testing::RunResult> runs;
  for (auto [sub_group, home] : {std::pair{5000, Tier::kDevice}, std::pair{3000, Tier::kCpu},
                                 std::pair{11000, Tier::kNvme}}) {
    TrainConfig c = TinyConfig(dir.path());
    c.compute_dtype = DType::kBF16;
    c.adam_states = DType::kBF16;
    c.sub_group_size = sub_group;
    c.offload_optimizer.device = home;
    runs.push_back(RunEngine(c, 2, 4));
  }
  // Rank 0's m and v, block by block in flat order, whatever the sub-groups.
  auto moments = [](const testing::RunResult& r) {
    std::map<std::tuple<int, int, int64_t>, const std::vector<std::byte>*> ordered;
    for (const auto& [name, bytes] : r.state) {
      const std::optional<TensorKey> k = TensorKey::Parse(name);
      if (k && (k->role == TensorRole::kAdamM || k->role == TensorRole::kAdamV))
        ordered[{k->block, static_cast<int>(k->role), k->offset}] = &bytes;
    }
    std::vector<std::byte> all;
    for (const auto& [key, bytes] : ordered) all.insert(all.end(), bytes->begin(), bytes->end());
    return all;
  };
  ASSERT_FALSE(moments(runs[0]).empty());
  for (size_t i = 1; i < runs.size(); ++i) {
    EXPECT_TRUE(testing::BitwiseEqual(runs[0], runs[i])) << i << ": max diff " << testing::MaxAbsDiff(runs[0], runs[i]);
    EXPECT_TRUE(moments(runs[0]) == moments(runs[i])) << i;
  }
  EXPECT_LT(runs[0].stats.back().loss, runs[0].stats.front().loss);
}

// strata.master_weights "split" (Note [Split master]): the master kept as the working weights
// + low halves. Wherever the states live (host memory, NVMe, host blocks; one rank or two) the
// run is bitwise the same; against an fp32 master it differs only by the even ties' one-ulp
// steps, so its losses and weights stay within rounding of that run. The master takes half
// the bytes, visited (checkpoints) as fp32.
TEST(Engine, SplitMasterTrainsAsTheFp32Master) {
  TempDir dir;
  auto config = [&](Tier params, Tier states, int64_t host_blocks, bool split) {
    TrainConfig c = TinyConfig(dir.path());
    c.compute_dtype = DType::kBF16;
    c.adam_states = DType::kBF16;
    c.offload_param.device = params;
    c.offload_optimizer.device = states;
    c.host_blocks = host_blocks;
    c.split_master = split;
    return c;
  };
  const testing::RunResult fp32 = RunEngine(config(Tier::kNvme, Tier::kNvme, 0, false), 1, 4);
  std::vector<testing::RunResult> split;
  split.push_back(RunEngine(config(Tier::kNvme, Tier::kNvme, 0, true), 1, 4));
  split.push_back(RunEngine(config(Tier::kCpu, Tier::kCpu, 0, true), 1, 4));
  split.push_back(RunEngine(config(Tier::kNvme, Tier::kNvme, 2, true), 1, 4));
  for (size_t i = 1; i < split.size(); ++i) {
    EXPECT_TRUE(testing::BitwiseEqual(split[0], split[i])) << i << ": " << testing::MaxAbsDiff(split[0], split[i]);
    ASSERT_EQ(split[i].stats.size(), split[0].stats.size());
    for (size_t s = 0; s < split[0].stats.size(); ++s) EXPECT_EQ(split[i].stats[s].loss, split[0].stats[s].loss) << i;
  }
  ASSERT_EQ(split[0].stats.size(), fp32.stats.size());
  EXPECT_EQ(split[0].stats[0].loss, fp32.stats[0].loss);  // the same initial weights
  for (size_t s = 0; s < fp32.stats.size(); ++s)
    EXPECT_NEAR(split[0].stats[s].loss, fp32.stats[s].loss, 1e-4 * fp32.stats[s].loss) << s;
  EXPECT_LT(testing::MaxAbsDiff(split[0], fp32), 1e-5);
  EXPECT_LT(split[0].stats.back().loss, split[0].stats.front().loss);
  // Half the master's bytes, where they live; everything else as with an fp32 master.
  EXPECT_EQ(2 * split[0].ledger.At(StateKind::kMaster, Tier::kNvme), fp32.ledger.At(StateKind::kMaster, Tier::kNvme));
  EXPECT_EQ(split[0].ledger.Of(StateKind::kWorking), fp32.ledger.Of(StateKind::kWorking));
  EXPECT_EQ(split[0].ledger.Of(StateKind::kAdamM), fp32.ledger.Of(StateKind::kAdamM));
  // Visited as the fp32 master (what a checkpoint holds), of the fp32 master's size. The
  // working weights and the master differ only where a tie's one-ulp step did (a handful).
  size_t elements = 0, working_differ = 0, master_differ = 0;
  for (const auto& [name, bytes] : fp32.state) {
    ASSERT_TRUE(split[0].state.count(name)) << name;
    const std::vector<std::byte>& other = split[0].state.at(name);
    ASSERT_EQ(other.size(), bytes.size()) << name;
    const TensorRole role = TensorKey::Parse(name)->role;
    if (role != TensorRole::kWorking && role != TensorRole::kMaster) continue;
    const size_t width = role == TensorRole::kWorking ? 2 : 4;
    for (size_t i = 0; i < bytes.size(); i += width) {
      const bool differ = std::memcmp(bytes.data() + i, other.data() + i, width) != 0;
      (role == TensorRole::kWorking ? working_differ : master_differ) += differ;
      elements += role == TensorRole::kWorking;
    }
  }
  // (About one master in 2^17 is a tie per step; a bf16 weight flips only when a nudged
  // master later lands on a rounding boundary: on a 0.4 B model, one weight after 4 steps.)
  EXPECT_LE(working_differ, elements / 10000) << master_differ << " masters differ";
  EXPECT_LE(master_differ, elements / 1000);
}

// Two ranks, stages 2 and 3: a rank's optimizer range is part of its working weights (stage 2:
// all of them, shared after the update), and the split runs train as one rank's do.
TEST(Engine, SplitMasterShardsLikeTheFp32Master) {
  TempDir dir;
  for (int stage : {2, 3}) {
    SCOPED_TRACE(stage);
    TrainConfig c = TinyConfig(dir.path());
    c.zero_stage = stage;
    c.compute_dtype = DType::kBF16;
    c.offload_optimizer.device = Tier::kCpu;
    if (stage == 3) c.offload_param.device = Tier::kNvme;
    TrainConfig split = c;
    split.split_master = true;
    const testing::RunResult a = RunEngine(c, 2, 3), b = RunEngine(split, 2, 3);
    ASSERT_EQ(a.stats.size(), b.stats.size());
    for (size_t s = 0; s < a.stats.size(); ++s) EXPECT_NEAR(b.stats[s].loss, a.stats[s].loss, 1e-4 * a.stats[s].loss);
    EXPECT_LT(testing::MaxAbsDiff(a, b), 1e-5);
  }
}

// A split master's state restored from what VisitState gave (as a checkpoint does) continues
// bitwise; restored into an fp32-master run, the same master goes on (and back).
TEST(Engine, SplitMasterStateRestoresBothWays) {
  TempDir dir;
  TrainConfig c = TinyConfig(dir.path());
  c.compute_dtype = DType::kBF16;
  c.offload_param.device = c.offload_optimizer.device = Tier::kNvme;
  c.split_master = true;
  auto data = data::TokenDataset::Open(c.data, c.model.vocab_size, c.model.seq_len);
  ASSERT_TRUE(data.ok());
  auto comm = MakeSingleRankCommunicator();
  auto make = [&](bool split) {
    TrainConfig k = c;
    k.split_master = split;
    auto e = Engine::Create(testing::Settled(k, comm->world_size()), comm.get(), nullptr);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return std::move(*e);
  };
  std::unique_ptr<Engine> a = make(true);
  for (int s = 0; s < 2; ++s) ASSERT_TRUE(a->Step(s, **data).ok());
  const testing::StateBytes saved = testing::VisitAll(*a);
  for (bool split : {true, false}) {
    SCOPED_TRACE(split ? "into a split master" : "into an fp32 master");
    std::unique_ptr<Engine> b = make(split);
    testing::RestoreAll(*b, saved);
    b->set_counters(a->counters());
    EXPECT_TRUE(testing::VisitAll(*b) == saved);  // the master rebuilt from what was stored, bit for bit
  }
  std::unique_ptr<Engine> b = make(true);
  testing::RestoreAll(*b, saved);
  b->set_counters(a->counters());
  for (int s = 2; s < 4; ++s) {
    auto x = a->Step(s, **data), y = b->Step(s, **data);
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_EQ(x->loss, y->loss) << s;
  }
  EXPECT_TRUE(testing::VisitAll(*a) == testing::VisitAll(*b));
}

TEST(Engine, SplitMasterNeedsBf16WeightsTheUpdateCanRead) {
  TempDir dir;
  TrainConfig c = TinyConfig(dir.path());
  c.split_master = true;  // TinyConfig computes in fp32
  auto comm = MakeSingleRankCommunicator();
  auto device_comm = MakeSingleRankCommunicator();
  auto device = MakeFakeAsyncDevice(device_comm.get(), {});  // (outlives the engines)
  auto e = testing::TrySettle(c, comm->world_size());  // refused before any engine is made
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("strata.master_weights"), std::string::npos) << e.status().ToString();
  EXPECT_NE(e.status().message().find("bf16 compute"), std::string::npos) << e.status().ToString();
  // Working weights resident on a device: the CPU update cannot read them.
  c.compute_dtype = DType::kBF16;
  e = testing::TrySettle(c, comm->world_size(), device->is_host());  // offload_param none: all resident
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("on the device"), std::string::npos) << e.status().ToString();
  c.offload_param.device = Tier::kCpu;
  auto engine = Engine::Create(testing::Settled(c, comm->world_size(), device->is_host()), comm.get(), nullptr, {},
                               device.get());
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
}

TEST(Engine, PrefetchStaysWithinItsBudget) {
  TempDir dir;
  TrainConfig c = TinyConfig(dir.path());
  c.compute_dtype = DType::kBF16;
  c.offload_param.device = Tier::kNvme;
  c.offload_optimizer.device = Tier::kNvme;
  c.prefetch_bucket_size = 40000;  // elements: about two layer shards in flight
  auto r = RunEngine(c, 2, 2);
  EXPECT_GT(r.prefetch_high_water, 0u);
  EXPECT_LE(r.prefetch_high_water, r.prefetch_budget);
}

// A training step reads into and writes from the engine's pinned pools only, and those are
// registered with the NVMe tier (io_uring's fixed buffers): what bench io measures.
TEST(Engine, StepTransfersUseRegisteredMemoryOnly) {
  TempDir dir;
  TrainConfig c = TinyConfig(dir.path());
  c.offload_param.device = Tier::kNvme;
  c.offload_optimizer.device = Tier::kNvme;
  auto data = data::TokenDataset::Open(c.data, c.model.vocab_size, c.model.seq_len);
  ASSERT_TRUE(data.ok());
  auto comm = MakeSingleRankCommunicator();
  auto engine = Engine::Create(testing::Settled(c, comm->world_size()), comm.get(), nullptr);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  ASSERT_TRUE((*engine)->Step(0, **data).ok());
  const NvmeTierStats before = (*engine)->nvme_stats();
  ASSERT_TRUE((*engine)->Step(1, **data).ok());
  const NvmeTierStats after = (*engine)->nvme_stats();
  EXPECT_GT(after.bytes_read, before.bytes_read);
  EXPECT_GT(after.bytes_written, before.bytes_written);
  EXPECT_EQ(after.unregistered_bytes, before.unregistered_bytes);
}

// Engine::OnStepVisit (the progress of a long step): each training step reports its block
// visits as they start, 0..total-1 in order, total the step's visit plan; eval reports none.
TEST(Engine, StepVisitsAreReportedInOrderAndEvalReportsNone) {
  TempDir dir;
  for (StepSchedule schedule : {StepSchedule::kMicroBatch, StepSchedule::kLayerMajor}) {
    TrainConfig c = TinyConfig(dir.path());
    c.grad_accum = 2;
    c.schedule_setting = schedule;
    auto data = data::TokenDataset::Open(c.data, c.model.vocab_size, c.model.seq_len);
    ASSERT_TRUE(data.ok());
    auto comm = MakeSingleRankCommunicator();
    auto engine = Engine::Create(testing::Settled(c, comm->world_size()), comm.get(), nullptr);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    std::vector<std::pair<size_t, size_t>> seen;
    (*engine)->OnStepVisit([&](size_t done, size_t total) { seen.push_back({done, total}); });
    ASSERT_TRUE((*engine)->EvalLoss(**data, 1).ok());
    EXPECT_TRUE(seen.empty());
    for (int64_t step = 0; step < 2; ++step) {
      seen.clear();
      ASSERT_TRUE((*engine)->Step(step, **data).ok());
      ASSERT_FALSE(seen.empty());
      for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], std::make_pair(i, seen.size())) << i;
    }
  }
}

// Note [Building blocks], Note [Known zero]: creation writes the working weights and the
// master weights only; Adam's m and v are zero without a write, read back as zeros (a
// checkpoint taken before the first step holds them) with no disk read, and the first step
// trains as with written zeros (OffloadNoneCpuNvmeAreBitwiseIdentical: nvme vs the cpu tier).
TEST(Engine, CreationWritesWorkingAndMasterOnly) {
  TempDir dir;
  for (DType moments : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(moments));
    TrainConfig c = TinyConfig(dir.path());
    c.compute_dtype = DType::kBF16;
    c.adam_states = moments;
    c.offload_param.device = c.offload_optimizer.device = Tier::kNvme;
    auto comm = MakeSingleRankCommunicator();
    auto engine = Engine::Create(testing::Settled(c, comm->world_size()), comm.get(), nullptr);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    const MemoryLedger& l = (*engine)->ledger();
    const uint64_t written = l.At(StateKind::kWorking, Tier::kNvme) + l.At(StateKind::kMaster, Tier::kNvme);
    const uint64_t moments_bytes = l.Of(StateKind::kAdamM) + l.Of(StateKind::kAdamV);
    ASSERT_GT(moments_bytes, 0u);
    EXPECT_EQ((*engine)->nvme_stats().bytes_written, written);
    EXPECT_EQ((*engine)->creation().state_bytes, written);
    EXPECT_EQ((*engine)->creation().zero_bytes, moments_bytes);
    uint64_t zero_moment_bytes = 0;
    ASSERT_TRUE((*engine)->VisitState([&](const TensorKey& k, std::span<const std::byte> bytes) {
                  if (k.role == TensorRole::kAdamM || k.role == TensorRole::kAdamV)
                    for (std::byte x : bytes) zero_moment_bytes += x == std::byte{0};
                  return Status();
                }).ok());
    EXPECT_EQ(zero_moment_bytes, moments_bytes);
    EXPECT_EQ((*engine)->nvme_stats().bytes_read, written);  // the moments came from no disk
    auto data = data::TokenDataset::Open(c.data, c.model.vocab_size, c.model.seq_len);
    ASSERT_TRUE(data.ok());
    auto step = (*engine)->Step(0, **data);
    ASSERT_TRUE(step.ok()) << step.status().ToString();
    EXPECT_TRUE(std::isfinite(step->loss));
  }
}

// Keeping every block's activations (no recompute) gives bitwise the recompute path: the
// kept graphs saved the parameter tensors, re-bound to a fresh gather before each backward.
TEST(Engine, KeptActivationsTrainBitwiseLikeRecompute) {
  TempDir dir;
  for (model::Arch arch : {model::Arch::kGpt2, model::Arch::kLlama}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(::testing::Message() << (arch == model::Arch::kGpt2 ? "gpt2 " : "llama ") << DTypeName(dtype));
      TrainConfig c = TinyConfig(dir.path());
      c.model.arch = arch;
      if (arch == model::Arch::kLlama) c.model.n_kv_head = 2;
      c.compute_dtype = dtype;
      c.offload_param.device = Tier::kNvme;
      c.grad_accum = 2;
      auto recompute = RunEngine(c, 2, 3);
      c.recompute = Recompute::kNever;  // kept activations
      auto kept = RunEngine(c, 2, 3);
      ASSERT_EQ(kept.stats.size(), 3u);
      for (int s = 0; s < 3; ++s) EXPECT_EQ(kept.stats[s].loss, recompute.stats[s].loss) << "step " << s;
      EXPECT_TRUE(testing::BitwiseEqual(recompute, kept));
      EXPECT_TRUE(recompute.state == kept.state);
      const FakeDeviceOptions fake{.seed = 5, .max_delay_us = 500};
      auto kept_on_device = RunEngine(c, 2, 3, &fake);
      EXPECT_TRUE(testing::BitwiseEqual(recompute, kept_on_device));
    }
  }
}

}  // namespace
}  // namespace strata
