// Mixtures of experts in the step's traffic (src/estimate/expert_traffic.h): the expected share
// of experts a visit reads at uniform routing, where routed fetching applies, the NVMe and link
// bytes of a tiny 16-expert top-2 model against the arithmetic, and the shipped Qwen3-30B-A3B
// configs on the GPU machine (one H100 80 GB, 128 GiB host memory, 60 GiB of free disk).
#include "src/estimate/expert_traffic.h"

#include <cmath>

#include <gtest/gtest.h>

#include "src/estimate/step_traffic.h"
#include "support/settled.h"

namespace strata {
namespace {

TEST(ExpertTraffic, ExpectedShareAtUniformRouting) {
  EXPECT_NEAR(ExpectedExpertShare(128, 8, 1), 8.0 / 128, 1e-16);  // one token: its top_k
  EXPECT_NEAR(ExpectedExpertShare(16, 2, 1), 2.0 / 16, 1e-16);
  EXPECT_NEAR(ExpectedExpertShare(16, 2, 8), 1 - std::pow(7.0 / 8, 8), 1e-15);
  EXPECT_NEAR(ExpectedExpertShare(128, 8, 16), 1 - std::pow(15.0 / 16, 16), 1e-15);
  EXPECT_GT(ExpectedExpertShare(128, 8, 256), 1 - 1e-7);
  EXPECT_EQ(ExpectedExpertShare(128, 8, 4096), 1.0);  // Qwen3-30B-A3B at 4096 tokens: every expert
  EXPECT_EQ(ExpectedExpertShare(8, 8, 1), 1.0);
  EXPECT_EQ(ExpectedExpertShare(16, 2, 0), 0.0);
}

// A tiny Qwen3-MoE (3 sparse layers of 16 experts, top-2) with its weights and states on NVMe,
// 2 x 4 tokens per micro-batch, 3 micro-batches, bf16.
TrainConfig TinyMoe(const std::string& strata_keys = "") {
  auto c = ParseTrainConfig(R"({
    "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3, "bf16": {"enabled": true},
    "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/var/tmp/strata"},
                          "offload_optimizer": {"device": "nvme", "nvme_path": "/var/tmp/strata"}},
    "strata": {"recompute": "always", "schedule": "micro_batch", "optimizer_overlap": "forward", )" +
                                strata_keys + R"(
               "model": {"arch": "llama", "hf_model_type": "qwen3_moe", "vocab_size": 256, "seq_len": 4,
                         "n_layer": 3, "d_model": 64, "n_head": 4, "n_kv_head": 2, "qk_norm": true,
                         "tie_embeddings": false, "moe": {"num_experts": 16, "top_k": 2, "expert_ffn": 32}}}})",
                            "TinyMoe");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

ShardPlan PlanOf(const SettledConfig& c, int world = 1) {
  return ShardPlan::Make(c, ModelShape::Of(c.model), world, 0, {.host = false});
}

constexpr uint64_t kExpertBytes = 16 * 3 * 64 * 32 * 2;  // a layer's experts in bf16
constexpr int kSparseLayers = 3;

TEST(ExpertTraffic, BytesPerStepAtUniformRoutingAreTheArithmetic) {
  const RunConfig run = testing::Settled(TinyMoe(), 1, /*host_device=*/false);
  const ShardPlan plan = PlanOf(*run);
  ASSERT_EQ(TokensPerVisit(*run, plan), 8);
  ASSERT_EQ(plan.compute, DType::kBF16);
  for (int b = 1; b <= kSparseLayers; ++b) {
    ASSERT_TRUE(plan.FetchesRouted(b));
    EXPECT_EQ(static_cast<uint64_t>(plan.blocks[b].experts.numel * plan.blocks[b].experts.count) * 2, kExpertBytes);
  }
  EXPECT_FALSE(plan.FetchesRouted(0));  // the embedding and head are dense
  const double p = 1 - std::pow(7.0 / 8, 8);
  const double unread_per_pass = kSparseLayers * (1 - p) * kExpertBytes;  // every block visited once
  const uint64_t visits = 2 * 3;  // forward and backward of 3 micro-batches
  const StepTraffic t = EstimateStepTraffic(*run, plan);
  ASSERT_GT(t.working, kSparseLayers * kExpertBytes);
  ASSERT_FALSE(plan.format.MasterFromWorking());  // (the update reads no working weights)
  EXPECT_EQ(t.read_all_experts, t.states + visits * t.working);
  EXPECT_NEAR(static_cast<double>(t.read_at_most), t.states + visits * (t.working - unread_per_pass), visits);
  EXPECT_EQ(t.read_served, t.read_at_most - (t.working - (t.read_all_experts - t.read_at_most) / visits));
  const LinkTraffic l = EstimateLinkTraffic(*run, plan);
  EXPECT_NEAR(static_cast<double>(l.in_all_experts - l.in), visits * unread_per_pass, 1);
  // One token per visit reads its top 2 of 16 experts.
  const StepTraffic one = EstimateStepTraffic(*run, plan, 1);
  EXPECT_NEAR(static_cast<double>(one.read_at_most),
              one.states + visits * (t.working - kSparseLayers * (14.0 / 16) * kExpertBytes), visits);
  EXPECT_EQ(one.read_all_experts, t.read_all_experts);
  EXPECT_EQ(FormatExpertTraffic(*run, plan).find("routing saves"), std::string::npos);  // 8 tokens: it saves
}

// With strata.expert_update "chosen" the update skips an expert no token of the step chose: its master, m and v (fp32, 12 B an
// element, on NVMe) are not written, at 2 x 4 x 3 = 24 tokens a step, and on 2 ranks at 48.
TEST(ExpertTraffic, UnchosenExpertsStatesAreNotWritten) {
  for (int world : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << world << " rank(s)");
    TrainConfig chosen = TinyMoe();
    chosen.expert_update = ExpertUpdate::kChosen;  // (stepping every expert writes them all)
    const RunConfig run = testing::Settled(chosen, world, false);
    const ShardPlan plan = PlanOf(*run, world);
    const StepTraffic all = EstimateStepTraffic(*testing::Settled(TinyMoe(), world, false), plan);
    EXPECT_EQ(all.written, all.states + all.working);
    uint64_t expert_states = 0;  // this rank's optimizer range within experts, 12 B an element
    for (int b = 1; b <= kSparseLayers; ++b) {
      const BlockPlan& bp = plan.blocks[b];
      const int64_t lo = std::max(bp.optimizer.begin, bp.experts.begin);
      const int64_t hi = std::min(bp.optimizer.begin + bp.optimizer.len, bp.experts.end());
      expert_states += hi > lo ? static_cast<uint64_t>(hi - lo) * 12 : 0;
    }
    ASSERT_GT(expert_states, 0u);
    const double unchosen = std::pow(7.0 / 8, 24 * world);
    const StepTraffic t = EstimateStepTraffic(*run, plan);
    EXPECT_NEAR(static_cast<double>(t.written), t.states - unchosen * expert_states + t.working, 1);
  }
}

TEST(ExpertTraffic, EveryExpertWithFetchAllOrKeptActivations) {
  const RunConfig all = testing::Settled(TinyMoe(R"("expert_fetch": "all",)"), 1, false);
  const ShardPlan plan = PlanOf(*all);
  EXPECT_FALSE(plan.FetchesRouted(1));
  StepTraffic t = EstimateStepTraffic(*all, plan);
  EXPECT_EQ(t.read_at_most, t.read_all_experts);
  EXPECT_NE(FormatExpertTraffic(*all, plan).find("expert_fetch \"all\""), std::string::npos);
  const RunConfig kept = testing::Settled(TinyMoe(R"("recompute": "never",)"), 1, false);
  EXPECT_FALSE(PlanOf(*kept).FetchesRouted(1));
}

// ZeRO-3 over 2 ranks: the ranks gather the experts some rank's tokens chose, so a visit's
// share is that of both ranks' 8 tokens; each rank reads its pieces of them.
TEST(ExpertTraffic, Zero3RanksGatherWhatAnyRankChose) {
  const RunConfig two = testing::Settled(TinyMoe(), 2, false);
  const ShardPlan sharded = PlanOf(*two, 2);
  EXPECT_TRUE(sharded.FetchesRouted(1));
  EXPECT_EQ(TokensPerVisit(*two, sharded), 16);
  const StepTraffic t = EstimateStepTraffic(*two, sharded);
  EXPECT_LT(t.read_at_most, t.read_all_experts);
  double unread = 0;  // per pass: this rank's pieces of the experts no token of either rank chose
  for (int b = 1; b <= kSparseLayers; ++b) {
    const BlockPlan& bp = sharded.blocks[b];
    const int64_t lo = std::max(bp.working.begin, bp.experts.begin);
    const int64_t hi = std::min(bp.working.begin + bp.working.len, bp.experts.end());
    unread += hi > lo ? std::pow(7.0 / 8, 16) * (hi - lo) * 2 : 0;
  }
  EXPECT_NEAR(static_cast<double>(t.read_all_experts - t.read_at_most), 6 * unread, 6);
  EXPECT_NE(FormatExpertTraffic(*two, sharded).find("x 2 ranks: ZeRO-3 ranks gather"), std::string::npos);
  // A dense model reads what it always did.
  TrainConfig dense = TinyMoe();
  dense.model.hf_model_type = "qwen3";
  dense.model.moe = {};
  const RunConfig d = testing::Settled(dense, 1, false);
  const StepTraffic dt = EstimateStepTraffic(*d, PlanOf(*d));
  EXPECT_EQ(dt.read_at_most, dt.read_all_experts);
  EXPECT_EQ(FormatExpertTraffic(*d, PlanOf(*d)), "");
}

TEST(ExpertTraffic, ResidentSparseBlocksAreNotFetched) {
  TrainConfig c = TinyMoe();
  c.offload_param.device = Tier::kCpu;
  c.resident_blocks = 3;  // the embedding and the first two layers
  const RunConfig run = testing::Settled(c, 1, false);
  const ShardPlan plan = PlanOf(*run);
  EXPECT_FALSE(plan.FetchesRouted(2));
  EXPECT_TRUE(plan.FetchesRouted(3));
  const LinkTraffic l = EstimateLinkTraffic(*run, plan);
  EXPECT_NEAR(static_cast<double>(l.in_all_experts - l.in), 6 * (1 - ExpectedExpertShare(16, 2, 8)) * kExpertBytes, 1);
}

// The GPU machine as `strata estimate --device cuda --device-memory 80G --host-memory 128G
// --disk-free 60G` states it, with the device at 80 GB (an H100's 80 GiB less what it keeps).
MachineCapacity GpuMachine() { return {128ull << 30, 60ull << 30, "/var/tmp/strata", 80'000'000'000ull}; }

StatusOr<SettledRun> SettledOnTheGpuMachine(const std::string& file, const MachineCapacity& m) {
  auto cfg = LoadTrainConfig(STRATA_SOURCE_DIR "/configs/" + file);
  if (!cfg.ok()) return cfg.status();
  cfg->bf16_auto = false;  // bf16, as on the GPU (settled here, "auto" would follow this CPU)
  cfg->compute_dtype = DType::kBF16;
  return SettleRunConfig(*cfg, {1, 1, /*on_gpu=*/true, {.host = false}, &m});
}

TEST(ExpertTraffic, Qwen3MoeLoraFitsOneH100) {
  const MachineCapacity m = GpuMachine();
  auto s = SettledOnTheGpuMachine("qwen3_30b_a3b_lora_gpu.json", m);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const MemoryEstimate& e = s->estimate;
  EXPECT_GT(e.parameters, 30'400'000'000);  // Qwen3-30B-A3B: 30.5 B
  EXPECT_LT(e.parameters, 30'600'000'000);
  EXPECT_TRUE(CheckFits(e, m, 1).ok()) << CheckFits(e, m, 1).message();
}

TEST(ExpertTraffic, Qwen3MoeFullFineTuningDoesNotFitTheGpuMachine) {
  const MachineCapacity m = GpuMachine();
  auto s = SettledOnTheGpuMachine("qwen3_30b_a3b_full_gpu.json", m);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const MemoryEstimate& e = s->estimate;
  const Status fits = CheckFits(e, m, 1);
  EXPECT_FALSE(fits.ok());
  // bf16 weights, split master, 8-bit moments, bf16 accumulators: about 8 B per parameter off
  // the GPU, more than host memory and disk hold together.
  EXPECT_GT(e.node_host_bytes(1) + e.node_nvme_bytes(1), m.host_available + m.nvme_free);
}

}  // namespace
}  // namespace strata
