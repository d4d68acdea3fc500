// Expert-aware fetching (Note [Expert-aware fetching]): a sparse layer's block reads its
// router, attention and norms, then only the experts some token of the micro-batch chose.
// On a tiny 16-expert top-2 model whose micro-batches of 8 tokens leave experts unchosen, the
// NVMe bytes a step reads are the other parts' for every visit plus one expert's for each
// expert the routers reported choosing, and training is bitwise that of fetching every expert,
// on every path that fetches so (and on those that fetch whole); across ZeRO-3 ranks, every
// rank gathers the experts some rank's tokens chose. A fetch that fails is kept by the block's
// routing for the engine to report, not thrown through LibTorch's forward.
#include <gtest/gtest.h>

#include "src/engine/experts/block_routing.h"
#include "src/engine/experts/expert_parts.h"
#include "strata/communicator.h"
#include "strata/trace.h"
#include "support/settled.h"
#include "tests/engine/engine_test_util.h"

namespace strata {
namespace {

using testing::RunEngine;
using testing::RunResult;
using testing::TempDir;

TrainConfig SixteenExperts(const std::string& dir, ExpertFetch fetch) {
  TrainConfig c = testing::TinyConfig(dir);
  c.model.arch = model::Arch::kLlama;
  c.model.hf_model_type = "qwen3_moe";
  c.model.qk_norm = true;
  c.model.n_kv_head = 2;
  c.model.seq_len = 8;
  c.model.moe = {16, 2, 32, true, {}, 0.01};
  c.micro_batch = 1;  // 8 tokens choose at most 16 of the (16 x 2) pairs: some experts go unchosen
  c.grad_accum = 2;
  c.compute_dtype = DType::kBF16;  // the master apart: the update reads no working weights
  c.lr = 0.01;
  c.optimizer_overlap = OptimizerOverlap::kNone;
  c.schedule_setting = StepSchedule::kMicroBatch;
  c.model.tie_embeddings = false;
  c.offload_param.device = Tier::kNvme;
  c.offload_optimizer.device = Tier::kCpu;
  c.expert_fetch = fetch;
  return c;
}

// Adapters on q_proj and on every expert (Note [Expert adapters]): the experts' frozen
// weights are fetched by routing, their adapters with the rest of the block.
void AdaptExperts(TrainConfig& c) {
  c.model.lora.r = 4;
  c.model.lora.alpha = 8;
  c.model.lora.target_modules = {"q_proj"};
  c.model.lora.target_parameters = {"experts.gate_up_proj", "experts.down_proj"};
}

// The NVMe bytes of one step's visits: each block's working weights whole, a sparse layer's
// without its experts, and `routed` experts of `expert_bytes` each.
uint64_t FetchBytes(const ShardPlan& plan, int micro_batches, int64_t routed, uint64_t* expert_bytes) {
  uint64_t bytes = 0;
  for (const Visit& v : plan.Visits(micro_batches, /*backward=*/true)) {
    const std::vector<WorkingPart> parts = PartsOfWorking(plan, v.block);
    if (parts.empty()) bytes += plan.blocks[v.block].working_tensor_len() * plan.dsize;
    for (const WorkingPart& p : parts) {
      if (p.expert < 0) bytes += p.len * plan.dsize;
      else *expert_bytes = p.len * plan.dsize;
    }
  }
  return bytes + static_cast<uint64_t>(routed) * *expert_bytes;
}

TEST(ExpertFetch, ReadsTheRoutedExpertsOnly) {
  TempDir dir;
  const TrainConfig c = SixteenExperts(dir.path(), ExpertFetch::kRouted);
  auto data = data::TokenDataset::Open(c.data, c.model.vocab_size, c.model.seq_len);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  auto comm = MakeSingleRankCommunicator();
  Tracer tracer;
  auto engine = Engine::Create(testing::Settled(c), comm.get(), &tracer);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  const ShardPlan& plan = (*engine)->plan();
  ASSERT_TRUE(plan.FetchesRouted(1));
  const int sparse_visits = 2 * static_cast<int>(c.grad_accum) * static_cast<int>(c.model.n_layer);  // forward, recomputation
  for (int s = 0; s < 3; ++s) {
    SCOPED_TRACE(::testing::Message() << "step " << s);
    const NvmeTierStats before = (*engine)->nvme_stats();
    auto st = (*engine)->Step(s, **data);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    ASSERT_TRUE((*engine)->Finish().ok());  // its write-backs done: the next step reads the disk
    uint64_t expert_bytes = 0;
    const uint64_t want = FetchBytes(plan, static_cast<int>(c.grad_accum), st->experts_routed, &expert_bytes);
    EXPECT_EQ(st->nvme_read_bytes, want) << st->experts_routed << " experts routed, " << expert_bytes << " B each";
    EXPECT_EQ((*engine)->nvme_stats().bytes_read - before.bytes_read, want);
    EXPECT_EQ(st->experts_fetched, st->experts_routed);
    EXPECT_LT(st->experts_routed, 16 * sparse_visits);  // the check means something
    EXPECT_GT(st->experts_routed, 0);
    const uint64_t every = FetchBytes(plan, static_cast<int>(c.grad_accum), 16 * sparse_visits, &expert_bytes);
    std::printf("step %d: %ld of %d experts routed: %lu B read (every expert: %lu B)\n", s,
                static_cast<long>(st->experts_routed), 16 * sparse_visits, static_cast<unsigned long>(st->nvme_read_bytes),
                static_cast<unsigned long>(every));
  }
}

// Evaluation fetches the routed experts as training does (nothing recorded for the update).
TEST(ExpertFetch, EvaluatesAsFetchingEveryExpert) {
  TempDir dir;
  double losses[2] = {0, 0};
  int64_t fetched[2] = {0, 0};
  for (ExpertFetch fetch : {ExpertFetch::kRouted, ExpertFetch::kAll}) {
    const TrainConfig c = SixteenExperts(dir.path(), fetch);
    auto data = data::TokenDataset::Open(c.data, c.model.vocab_size, c.model.seq_len);
    ASSERT_TRUE(data.ok()) << data.status().ToString();
    auto comm = MakeSingleRankCommunicator();
    auto engine = Engine::Create(testing::Settled(c), comm.get(), nullptr);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    auto st = (*engine)->Step(0, **data);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    auto loss = (*engine)->EvalLoss(**data, 3);
    ASSERT_TRUE(loss.ok()) << loss.status().ToString();
    losses[fetch == ExpertFetch::kAll] = *loss;
    fetched[fetch == ExpertFetch::kAll] = st->experts_fetched;
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_GT(fetched[0], 0);
  EXPECT_EQ(fetched[1], 0);
}

TEST(ExpertFetch, TrainsBitwiseAsFetchingEveryExpert) {
  TempDir dir;
  const FakeDeviceOptions delays{.seed = 11, .max_delay_us = 200, .copy_gbps = 0, .poison = true};
  struct Variant {
    const char* name;
    int world;
    bool fake;
    void (*edit)(TrainConfig&);
  };
  const Variant variants[] = {
      {"one rank, NVMe", 1, false, [](TrainConfig&) {}},
      {"two ranks, stage 2, cpu tier", 2, false, [](TrainConfig& c) {
         c.zero_stage = 2;  // (the working weights on NVMe are for stage 3)
         c.offload_param.device = Tier::kCpu;
       }},
      {"fake device, NVMe", 1, true, [](TrainConfig&) {}},
      {"fake device, cpu tier", 1, true, [](TrainConfig& c) { c.offload_param.device = Tier::kCpu; }},
      {"layer-major", 1, false, [](TrainConfig& c) { c.schedule_setting = StepSchedule::kLayerMajor; }},
      {"optimizer overlapping the forward", 1, true, [](TrainConfig& c) { c.optimizer_overlap = OptimizerOverlap::kForward; }},
      {"two ranks, stage 3: the experts some rank chose", 2, false, [](TrainConfig&) {}},
      {"two ranks, stage 3, fake device, optimizer overlapping the forward", 2, true,
       [](TrainConfig& c) { c.optimizer_overlap = OptimizerOverlap::kForward; }},
      {"two ranks, stage 3, fake device, layer-major", 2, true,
       [](TrainConfig& c) { c.schedule_setting = StepSchedule::kLayerMajor; }},
      {"kept activations (fetched whole)", 1, false, [](TrainConfig& c) { c.recompute = Recompute::kNever; }},
      {"LoRA on the attention and the experts", 1, false, [](TrainConfig& c) { AdaptExperts(c); }},
      {"LoRA, two ranks, stage 3, fake device, optimizer overlapping the forward", 2, true, [](TrainConfig& c) {
         AdaptExperts(c);
         c.optimizer_overlap = OptimizerOverlap::kForward;
       }},
  };
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    TrainConfig routed = SixteenExperts(dir.path(), ExpertFetch::kRouted), all = routed;
    v.edit(routed);
    v.edit(all);
    all.expert_fetch = ExpertFetch::kAll;
    const RunResult want = RunEngine(all, v.world, 3, v.fake ? &delays : nullptr);
    const RunResult got = RunEngine(routed, v.world, 3, v.fake ? &delays : nullptr);
    testing::ExpectSameRun(want, got, 3);
    for (int s = 0; s < 3; ++s) EXPECT_EQ(want.stats[s].experts_fetched, 0) << "step " << s;
    if (std::string(v.name).find("fetched whole") == std::string::npos) {
      EXPECT_GT(got.stats[0].experts_fetched, 0);  // the routed path ran
    }
  }
}

class FailingFetcher final : public ExpertFetcher {
 public:
  Status FetchExperts(int, std::span<const int64_t>) override {
    ++calls;
    return Error(StatusCode::kIoError, "reading the experts of block 1: errno 5");
  }
  int calls = 0;
};

TEST(ExpertFetch, AFailedFetchIsKeptForTheEngineNotThrown) {
  ExpertState state;
  StepStats counts;
  FailingFetcher fetch;
  BlockRouting dense(0, 0, /*train=*/false, state, counts, fetch);
  EXPECT_EQ(dense.context(), nullptr);  // a dense block's layers report to no one
  BlockRouting routing(1, 4, /*train=*/false, state, counts, fetch);
  ASSERT_EQ(routing.context(), static_cast<model::ExpertRouting*>(&routing));
  const std::vector<int64_t> chosen = {1, 0, 2, 0};
  EXPECT_NO_THROW(routing.Routed(chosen));
  EXPECT_NO_THROW(routing.Routed(chosen));  // (a later layer's report: no second fetch)
  EXPECT_EQ(fetch.calls, 1);
  EXPECT_EQ(routing.status().code(), StatusCode::kIoError);
  EXPECT_NE(routing.status().message().find("errno 5"), std::string::npos);
  EXPECT_EQ(counts.experts_routed, 4);
}

}  // namespace
}  // namespace strata
