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
  auto parsed = ParseTrainConfig(R"({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0,
      "bf16": {"enabled": false}, "zero_optimization": {"stage": 3},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.002, "weight_decay": 0.0}},
      "strata": {"model": {"from": )" + nlohmann::json(hf).dump() + R"(, "seq_len": 32},
                 "lora": {"r": 4, "alpha": 8, "base_dtype": "nf4",
                          "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                             "down_proj"]}}})", "test");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  TrainConfig cfg = *parsed;
  testing::TrainOnOneWindow(dir.path(), kQloraSeq, 11, &cfg);
  const std::string initial = dir.path() + "/ckpt0", ck = dir.path() + "/ckpt";
  std::vector<double> losses;
  ASSERT_EQ(testing::TrainTwoRanksFromFolder(cfg, hf, kQloraSteps, ck, initial, &losses), "");
  const std::string init_adapter = dir.path() + "/adapter0", adapter = dir.path() + "/adapter",
                    merged = dir.path() + "/merged";
  ASSERT_TRUE(ckpt::ExportPeftAdapter(initial, init_adapter, {}).ok());
  testing::CliRun r = testing::RunStrata("export " + ck + " --out " + adapter);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = testing::RunStrata("export " + ck + " --out " + merged + " --merge-lora");  // bf16 by default over NF4
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("bf16"), std::string::npos) << r.out;
  const std::string losses_file = dir.path() + "/losses.json";
  std::ofstream(losses_file) << nlohmann::json(losses).dump();
  const int rc = testing::RunHfModels(fmt::format("qlora {} {}:{} {} 0.002 {} {} {} {}", hf, cfg.data.path,
                                                  kQloraSeq + 1, kQloraSteps, init_adapter, losses_file, adapter, merged),
                                      &out);
  std::printf("%s", out.c_str());
  EXPECT_EQ(rc, 0) << out;
}

}  // namespace
}  // namespace strata
