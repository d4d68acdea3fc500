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
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/ckpt_test_util.h"
#include "src/checkpoint/checkpoint.h"
#include "src/checkpoint/safetensors.h"
#include "src/hf/export.h"
#include "src/hf/hf_loader.h"
#include "hf/hf_peers.h"
#include "support/cli_run.h"
#include "support/temp_dir.h"
#include "support/settled.h"

namespace strata {
namespace {

constexpr int kQloraSteps = 10;
constexpr int kQloraSeq = 32;


// 2 x (seq + 1) tokens: with eval_fraction 0.5 every row of every step is tokens [0, seq].
std::string WriteQloraWindow(const std::string& dir, int64_t vocab) {
  const std::string path = dir + "/tokens.u16";
  std::mt19937 rng(11);
  std::vector<uint16_t> tokens(2 * (kQloraSeq + 1));
  for (uint16_t& t : tokens) t = static_cast<uint16_t>(rng() % static_cast<uint32_t>(vocab));
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(tokens.data()),
                                              static_cast<std::streamsize>(tokens.size() * 2));
  return path;
}

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
  cfg.offload_param.nvme_path = cfg.offload_optimizer.nvme_path = dir.path();
  cfg.offload_param.device = cfg.offload_optimizer.device = OffloadDevice::kNvme;
  cfg.data.path = WriteQloraWindow(dir.path(), cfg.model.vocab_size);
  cfg.data.format = data::TokenFormat::kUint16;
  cfg.data.eval_fraction = 0.5;
  auto w = ckpt::HfWeights::Open(hf, cfg.model);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  auto data = data::TokenDataset::Open(cfg.data, cfg.model.vocab_size, cfg.model.seq_len);
  ASSERT_TRUE(data.ok()) << data.status().ToString();

  const std::string initial = dir.path() + "/ckpt0", ck = dir.path() + "/ckpt";
  std::vector<double> losses;
  const int blocks = model::ModelSpec(cfg.model).num_blocks();
  ASSERT_EQ(testing::RunRanks(2,
                              [&](int rank, Communicator& c) -> Status {
                                STRATA_ASSIGN_OR_RETURN(const RunConfig settled, testing::TrySettle(cfg, c.world_size()));
                                STRATA_ASSIGN_OR_RETURN(
                                    auto e, Engine::Create(settled, &c, nullptr, ckpt::MakeInitFromHooks(*w, blocks)));
                                STRATA_RETURN_IF_ERROR(ckpt::SaveCheckpoint(*e, c, cfg, initial, 0));
                                for (int s = 0; s < kQloraSteps; ++s) {
                                  STRATA_ASSIGN_OR_RETURN(StepStats st, e->Step(s, **data));
                                  if (rank == 0) losses.push_back(st.loss);
                                }
                                return ckpt::SaveCheckpoint(*e, c, cfg, ck, kQloraSteps);
                              }),
            "");
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
