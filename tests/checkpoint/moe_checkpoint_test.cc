// Checkpoints of a mixture of experts whose updates skip the experts no token chose
// (strata.expert_update "chosen", Note [Expert updates]): each expert's own Adam step count is
// saved and restored (counters.expert_steps), so resuming, also resharded to another rank
// count, is bitwise the uninterrupted run, with LoRA on the experts too; a manifest whose counts
// do not fit the model is refused by name. Stepping every expert ("all", the default) resumes
// bitwise too, every count the run's.
#include <gtest/gtest.h>

#include <fstream>

#include "checkpoint/ckpt_test_util.h"
#include "engine/engine_test_util.h"
#include "src/checkpoint/checkpoint.h"

namespace strata {
namespace {

using testing::Params;
using testing::RunRanks;
using testing::TempDir;

// 16 experts, top-2, 8-token micro-batches: some experts go unchosen in most steps, so their
// step counts part from the global one. NVMe, bf16, two sub-groups per expert.
TrainConfig SparseMoeConfig(const std::string& dir) {
  TrainConfig c = testing::TinyConfig(dir);
  c.model.arch = model::Arch::kLlama;
  c.model.hf_model_type = "qwen3_moe";
  c.model.qk_norm = true;  // (Qwen3-MoE's blocks always have them)
  c.model.n_kv_head = 2;
  c.model.seq_len = 8;
  c.model.moe = {16, 2, 32, true, {}, 0.01};
  c.micro_batch = 1;
  c.compute_dtype = DType::kBF16;
  c.sub_group_size = 3072;  // an expert of 3 x 64 x 32 = 6144 elements: two sub-groups
  c.offload_param.device = Tier::kNvme;
  c.offload_optimizer.device = Tier::kNvme;
  c.model.tie_embeddings = false;
  c.expert_update = ExpertUpdate::kChosen;
  return c;
}

// The 2-rank checkpoint `ck` of step 3 resumed by one rank into `mid` and from there by two
// to step 6: bitwise `straight` (the uninterrupted 6 steps).
void ExpectReshardedResumeIsBitwise(const TrainConfig& cfg, const std::string& ck, const std::string& mid,
                                    const Params& straight) {
  Params restored, resumed;
  ASSERT_EQ(RunRanks(1, [&](int r, Communicator& c) { return testing::Train(cfg, r, c, 3, 3, ck, mid, &restored); }),
            "");
  ASSERT_EQ(RunRanks(2, [&](int r, Communicator& c) { return testing::Train(cfg, r, c, 3, 6, mid, "", &resumed); }),
            "");
  testing::ExpectBitwiseEqual(straight, resumed);
}

TEST(MoeCheckpoint, ResumesBitwiseWithEachExpertsStepCount) {
  TempDir dir;
  const TrainConfig cfg = SparseMoeConfig(dir.path());
  const std::string ck = dir.path() + "/ckpt";
  const Params straight = testing::ExpectResumeIsBitwise(cfg, ck);
  std::ifstream in(ck + "/step_00000003/manifest.json");
  const nlohmann::json m = nlohmann::json::parse(in);
  const auto steps = m["counters"]["expert_steps"].get<std::vector<std::vector<int64_t>>>();
  ASSERT_EQ(steps.size(), static_cast<size_t>(cfg.model.n_layer + 2));
  int behind = 0;  // experts that took fewer than the 3 steps
  for (const auto& block : steps)
    for (int64_t n : block) behind += n < 3;
  EXPECT_GT(behind, 0) << "every expert was chosen in every step: the counts are not what the test sees";

  // Resharded to one rank and back: the counts follow the model, not the ranks.
  ExpectReshardedResumeIsBitwise(cfg, ck, dir.path() + "/mid", straight);
}

TEST(MoeCheckpoint, SteppingEveryExpertResumesBitwiseWithTheRunsCount) {
  TempDir dir;
  TrainConfig cfg = SparseMoeConfig(dir.path());
  cfg.expert_update = ExpertUpdate::kAll;
  const std::string ck = dir.path() + "/ckpt";
  const Params straight = testing::ExpectResumeIsBitwise(cfg, ck);
  std::ifstream in(ck + "/step_00000003/manifest.json");
  const nlohmann::json m = nlohmann::json::parse(in);
  for (const auto& block : m["counters"]["expert_steps"].get<std::vector<std::vector<int64_t>>>())
    for (int64_t n : block) EXPECT_EQ(n, 3);
  ExpectReshardedResumeIsBitwise(cfg, ck, dir.path() + "/mid", straight);
  // The unchosen experts were stepped: the run differs from one that skips them.
  Params skipping;
  TrainConfig chosen = cfg;
  chosen.expert_update = ExpertUpdate::kChosen;
  ASSERT_EQ(RunRanks(2, [&](int r, Communicator& c) { return testing::Train(chosen, r, c, 0, 6, "", "", &skipping); }),
            "");
  bool differs = false;
  for (size_t b = 0; b < straight.size(); ++b)
    for (size_t i = 0; i < straight[b].size(); ++i) differs = differs || !torch::equal(straight[b][i].second, skipping[b][i].second);
  EXPECT_TRUE(differs);
}

// LoRA on the experts (Note [Expert adapters]): the adapters of every expert are one trained
// range, stepped whole, and resume bitwise, also resharded.
TEST(MoeCheckpoint, ExpertAdaptersResumeBitwise) {
  TempDir dir;
  TrainConfig cfg = SparseMoeConfig(dir.path());
  cfg.model.lora.r = 2;
  cfg.model.lora.target_modules = {"o_proj"};
  cfg.model.lora.target_parameters = {"experts.gate_up_proj", "experts.down_proj"};
  const std::string ck = dir.path() + "/ckpt";
  const Params straight = testing::ExpectResumeIsBitwise(cfg, ck);
  ExpectReshardedResumeIsBitwise(cfg, ck, dir.path() + "/mid", straight);
  int adapters = 0;
  for (const auto& block : straight)
    for (const auto& [name, value] : block) adapters += name.find("experts.gate_up_proj.lora_B") != std::string::npos;
  EXPECT_EQ(adapters, cfg.model.n_layer);
}

TEST(MoeCheckpoint, ExpertStepsOfAnotherShapeAreRefused) {
  TempDir dir;
  const TrainConfig cfg = SparseMoeConfig(dir.path());
  const std::string ck = dir.path() + "/ckpt";
  ASSERT_EQ(RunRanks(1, [&](int r, Communicator& c) { return testing::Train(cfg, r, c, 0, 1, "", ck, nullptr); }), "");
  const std::string manifest = ck + "/step_00000001/manifest.json";
  nlohmann::json m = nlohmann::json::parse(std::ifstream(manifest));
  m["counters"]["expert_steps"][1].push_back(1);  // a 17th expert
  std::ofstream(manifest) << m.dump();
  const std::string err =
      RunRanks(1, [&](int r, Communicator& c) { return testing::Train(cfg, r, c, 1, 1, ck, "", nullptr); });
  EXPECT_NE(err.find("counters.expert_steps does not have this model's experts"), std::string::npos) << err;
}

}  // namespace
}  // namespace strata
