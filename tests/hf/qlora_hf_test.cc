// QLoRA against peft + bitsandbytes (strata.lora.base_dtype "nf4", Note [NF4 base]). A LLaMA
// written by transformers is fine-tuned by Strata with rank-4 adapters on all seven
// projections over an NF4 base quantised from the folder (fp32 compute, 2 ranks, ZeRO-3,
// parameters and optimizer states on NVMe, 10 AdamW steps on one window), and by peft from
// Strata's initial adapters (exported at step 0) on the same batches over (a) bitsandbytes'
// 4-bit model of the folder (NF4, double quantisation) and (b) transformers' fp32 model given
// bitsandbytes' dequantised weights. Strata matches (b) as any fp32 run does, and (a) as
// closely as (a) matches (b); the merged folder is bf16 by default and holds the dequantised
// base plus the adapters (hf_models.py qlora: the tolerances and why).
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/ckpt_test_util.h"
#include "src/checkpoint/checkpoint.h"
#include "src/checkpoint/safetensors.h"
#include "src/hf/export.h"
#include "src/hf/hf_loader.h"
#include "hf/hf_peers.h"
#include "hf/one_window.h"
#include "support/cli_run.h"
#include "support/temp_dir.h"
#include "support/settled.h"

namespace strata {
namespace {

constexpr int kQloraSteps = 10;
constexpr int kQloraSeq = 32;


TEST(QloraVsPeftAndBitsandbytes, SameLossesAdaptersAndMergedWeights) {
  testing::RequireHfPeers(" peft bitsandbytes", "torch + transformers + safetensors + peft + bitsandbytes");
  testing::TempDir dir;
  const std::string hf = dir.path() + "/llama";
  std::string out;
  ASSERT_EQ(testing::RunHfModels("make llama " + hf, &out), 0) << out;
  const testing::LoraBesidePeft run = testing::TrainLoraBesidePeft(
      dir.path(), hf, R"({"r": 4, "alpha": 8, "base_dtype": "nf4", "target_modules": ["q_proj", "k_proj", "v_proj",
          "o_proj", "gate_proj", "up_proj", "down_proj"]})", 0.002, kQloraSeq, 11, kQloraSteps);
  ASSERT_EQ(run.error, "");
  const std::string merged = dir.path() + "/merged";
  // bf16 by default over NF4
  const testing::CliRun r = testing::RunStrata("export " + run.ck + " --out " + merged + " --merge-lora");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("bf16"), std::string::npos) << r.out;
  const int rc = testing::RunHfModels(fmt::format("qlora {} {}:{} {} 0.002 {} {} {} {}", hf, run.cfg.data.path,
                                                  kQloraSeq + 1, kQloraSteps, run.init_adapter, run.losses_file,
                                                  run.adapter, merged),
                                      &out);
  std::printf("%s", out.c_str());
  EXPECT_EQ(rc, 0) << out;
}

}  // namespace
}  // namespace strata
