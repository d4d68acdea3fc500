// strata.no_decay's default is Hugging Face Trainer's parameter groups: a GPT-2 (LayerNorms
// and biases), a LLaMA (RMSNorms) and a Phi-3 (fused projections) written by transformers,
// trained by Strata for 20 fp32 AdamW steps on 2 ranks (ZeRO-3, so each rank's optimizer
// range cuts the blocks; parameters and optimizer states on NVMe) and exported,
// match transformers + torch.optim.AdamW given Trainer.get_decay_parameter_names' groups on
// the same batches (hf_models.py decay: every weight and loss within 1e-5 relative), and
// differ from a run that decays everything (so the groups are what the test sees).
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
constexpr int kDecaySeq = 32;

class HfDecayGroups : public testing::HfPeersTest {};

TEST_P(HfDecayGroups, TrainerGroupsMatchTransformersAndAdamW) {
  testing::TempDir dir;
  const std::string hf = dir.path() + "/" + GetParam();
  std::string out;
  ASSERT_EQ(testing::RunHfModels("make " + GetParam() + " " + hf, &out), 0) << out;
  auto parsed = ParseTrainConfig(R"({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0,
      "bf16": {"enabled": false}, "zero_optimization": {"stage": 3},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.1}},
      "strata": {"model": {"from": )" + nlohmann::json(hf).dump() + R"(, "seq_len": 32}}})", "test");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  TrainConfig cfg = *parsed;
  testing::TrainOnOneWindow(dir.path(), kDecaySeq, 5, &cfg);
  ASSERT_FALSE(cfg.no_decay.has_value());  // the default
  const std::string ck = dir.path() + "/ckpt", exported = dir.path() + "/export";
  std::vector<double> losses;
  ASSERT_EQ(testing::TrainTwoRanksFromFolder(cfg, hf, kDecaySteps, ck, "", &losses), "");
  auto ex = ckpt::ExportHfFolder(ck, exported, {ckpt::ExportDType::kF32, 100'000, ""});
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  const std::string losses_file = dir.path() + "/losses.json";
  std::ofstream(losses_file) << nlohmann::json(losses).dump();
  const int rc = testing::RunHfModels(fmt::format("decay {} {}:{} {} 0.001 0.1 {} {}", hf, cfg.data.path, kDecaySeq + 1,
                                                  kDecaySteps, exported, losses_file),
                                      &out);
  std::printf("[ %s ] %s", GetParam().c_str(), out.c_str());
  EXPECT_EQ(rc, 0) << out;
}

INSTANTIATE_TEST_SUITE_P(Models, HfDecayGroups, ::testing::Values("gpt2", "llama", "phi3", "phi4", "gemma2", "gemma3", "mixtral", "qwen3moe", "qwen3moe_sparse", "olmoe"));

}  // namespace
}  // namespace strata
