// strata.no_decay's default is Hugging Face Trainer's parameter groups: a GPT-2 (LayerNorms
// and biases), a LLaMA (RMSNorms) and a Phi-3 (fused projections) written by transformers,
// trained by Strata for 20 fp32 AdamW steps on 2 ranks (ZeRO-3, so each rank's optimizer
// range cuts the blocks; parameters and optimizer states on NVMe) and exported,
// match transformers + torch.optim.AdamW given Trainer.get_decay_parameter_names' groups on
// the same batches (hf_models.py decay: every weight and loss within 1e-5 relative), and
// differ from a run that decays everything (so the groups are what the test sees).
// Mixtures of experts train 30 steps, stepping every expert as AdamW steps transformers 5's
// fused expert tensors (strata.expert_update "all", Note [Expert updates]), with experts no
// token chose in most steps; skipping them instead would not be as close (hf_models.py prints
// the reference's own noise floor beside). The sparse Qwen3-MoE trains once more with
// "chosen", against each expert as its own parameter.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/ckpt_test_util.h"
#include "src/checkpoint/checkpoint.h"
#include "src/hf/export.h"
#include "src/hf/hf_loader.h"
#include "hf/hf_peers.h"
#include "hf/one_window.h"
#include "support/temp_dir.h"
#include "support/settled.h"

namespace strata {
namespace {

constexpr int kDecaySteps = 20;
constexpr int kMoeDecaySteps = 30;
constexpr int kDecaySeq = 32;

class HfDecayGroups : public testing::HfPeersTest {};

// Strata trained by 2 ranks from the folder `hf` (written for GetParam()) with `experts`
// (strata.expert_update), exported and compared by hf_models.py decay.
void TrainAndCompare(const std::string& dir, const std::string& hf, const std::string& arch, const char* experts) {
  auto parsed = ParseTrainConfig(R"({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0,
      "bf16": {"enabled": false}, "zero_optimization": {"stage": 3},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.1}},
      "strata": {"expert_update": ")" + std::string(experts) + R"(", "model": {"from": )" + nlohmann::json(hf).dump() +
                                     R"(, "seq_len": 32}}})", "test");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  TrainConfig cfg = *parsed;
  testing::TrainOnOneWindow(dir, kDecaySeq, 5, &cfg);
  ASSERT_FALSE(cfg.no_decay.has_value());  // the default
  const int steps = cfg.model.moe.num_experts > 0 ? kMoeDecaySteps : kDecaySteps;
  const std::string ck = dir + "/ckpt-" + experts, exported = dir + "/export-" + experts;
  std::vector<double> losses;
  ASSERT_EQ(testing::TrainTwoRanksFromFolder(cfg, hf, steps, ck, "", &losses), "");
  auto ex = ckpt::ExportHfFolder(ck, exported, {ckpt::ExportDType::kF32, 100'000, ""});
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  const std::string losses_file = dir + "/losses-" + experts + ".json";
  std::ofstream(losses_file) << nlohmann::json(losses).dump();
  std::string out;
  const int rc = testing::RunHfModels(fmt::format("decay {} {}:{} {} 0.001 0.1 {} {} {}", hf, cfg.data.path,
                                                  kDecaySeq + 1, steps, exported, losses_file, experts),
                                      &out);
  std::printf("[ %s, experts %s ] %s", arch.c_str(), experts, out.c_str());
  EXPECT_EQ(rc, 0) << out;
}

TEST_P(HfDecayGroups, TrainerGroupsMatchTransformersAndAdamW) {
  testing::TempDir dir;
  const std::string hf = dir.path() + "/" + GetParam();
  std::string out;
  ASSERT_EQ(testing::RunHfModels("make " + GetParam() + " " + hf, &out), 0) << out;
  TrainAndCompare(dir.path(), hf, GetParam(), "all");
  if (GetParam() == "qwen3moe_sparse") TrainAndCompare(dir.path(), hf, GetParam(), "chosen");
}

INSTANTIATE_TEST_SUITE_P(Models, HfDecayGroups, ::testing::Values("gpt2", "llama", "phi3", "phi4", "gemma2", "gemma3", "mixtral", "qwen3moe", "olmoe", "mixtral_sparse", "qwen3moe_sparse", "olmoe_sparse"));

}  // namespace
}  // namespace strata
