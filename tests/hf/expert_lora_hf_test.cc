// LoRA on a mixture of experts' experts against PEFT (Note [Expert adapters]): a Qwen3-MoE
// with 64 experts (top-2) written by transformers is fine-tuned by Strata with rank-4
// adapters on the attention and on both fused expert tensors (target_parameters, PEFT's
// layout), fp32, 2 ranks, ZeRO-3, parameters and optimizer states on NVMe, 10 AdamW steps on
// one window of 32 tokens (many experts unchosen in each step); and by PEFT from Strata's
// initial adapters (exported at step 0) on the same batches. The losses, the adapters and
// the merged folder match (hf_models.py expert-lora); PEFT steps an unchosen expert's slices
// of the adapters (zeros in their gradient), and a run that holds them instead must not match.
#include <gtest/gtest.h>

#include <fstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "checkpoint/ckpt_test_util.h"
#include "hf/hf_peers.h"
#include "hf/one_window.h"
#include "src/hf/export.h"
#include "support/cli_run.h"
#include "support/temp_dir.h"

namespace strata {
namespace {

constexpr int kExpertLoraSteps = 10;
constexpr int kExpertLoraSeq = 32;

TEST(ExpertLoraVsPeft, SameLossesAdaptersAndMergedModel) {
  testing::RequireHfPeers(" peft", "torch + transformers + safetensors + peft");
  testing::TempDir dir;
  const std::string hf = dir.path() + "/qwen3moe_sparse";
  std::string out;
  ASSERT_EQ(testing::RunHfModels("make qwen3moe_sparse " + hf, &out), 0) << out;
  const testing::LoraBesidePeft run = testing::TrainLoraBesidePeft(
      dir.path(), hf, R"({"r": 4, "alpha": 8, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
          "target_parameters": ["experts.gate_up_proj", "experts.down_proj"]})", 0.005, kExpertLoraSeq, 13,
      kExpertLoraSteps);
  ASSERT_EQ(run.error, "");
  EXPECT_NE(run.export_out.find("fused expert tensors"), std::string::npos) << run.export_out;
  const std::string merged = dir.path() + "/merged";
  const testing::CliRun r = testing::RunStrata("export " + run.ck + " --out " + merged + " --merge-lora --dtype fp32");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("the experts of"), std::string::npos) << r.out;
  std::ifstream in(run.adapter + "/adapter_config.json");
  const nlohmann::json ac = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  EXPECT_EQ(ac.value("target_parameters", nlohmann::json()),
            nlohmann::json({"experts.gate_up_proj", "experts.down_proj"}));
  const int rc = testing::RunHfModels(fmt::format("expert-lora {} {}:{} {} 0.005 {} {} {} {}", hf, run.cfg.data.path,
                                                  kExpertLoraSeq + 1, kExpertLoraSteps, run.init_adapter,
                                                  run.losses_file, run.adapter, merged),
                                      &out);
  std::printf("%s", out.c_str());
  EXPECT_EQ(rc, 0) << out;
}

}  // namespace
}  // namespace strata
