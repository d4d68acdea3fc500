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
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/ckpt_test_util.h"
#include "src/checkpoint/checkpoint.h"
#include "src/hf/export.h"
#include "src/hf/hf_loader.h"
#include "hf/hf_peers.h"
#include "support/temp_dir.h"
#include "support/settled.h"

namespace strata {
namespace {

constexpr int kDecaySteps = 20;
constexpr int kDecaySeq = 32;

class HfDecayGroups : public testing::HfPeersTest {};

// 2 x (seq + 1) tokens: with eval_fraction 0.5 the training split is one window, so every
// row of every step is tokens [0, seq] (the same batches on both sides by construction).
std::string WriteOneWindow(const std::string& dir, int64_t vocab) {
  const std::string path = dir + "/tokens.u16";
  std::mt19937 rng(5);
  std::vector<uint16_t> tokens(2 * (kDecaySeq + 1));
  for (uint16_t& t : tokens) t = static_cast<uint16_t>(rng() % static_cast<uint32_t>(vocab));
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(tokens.data()),
                                              static_cast<std::streamsize>(tokens.size() * 2));
  return path;
}

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
  cfg.offload_param.nvme_path = cfg.offload_optimizer.nvme_path = dir.path();
  cfg.offload_param.device = cfg.offload_optimizer.device = OffloadDevice::kNvme;  // as users fine-tune
  cfg.data.path = WriteOneWindow(dir.path(), cfg.model.vocab_size);
  cfg.data.format = data::TokenFormat::kUint16;
  cfg.data.eval_fraction = 0.5;
  ASSERT_FALSE(cfg.no_decay.has_value());  // the default
  auto w = ckpt::HfWeights::Open(hf, cfg.model);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  auto data = data::TokenDataset::Open(cfg.data, cfg.model.vocab_size, cfg.model.seq_len);
  ASSERT_TRUE(data.ok()) << data.status().ToString();

  const std::string ck = dir.path() + "/ckpt", exported = dir.path() + "/export";
  std::vector<double> losses;
  const int blocks = model::ModelSpec(cfg.model).num_blocks();
  ASSERT_EQ(testing::RunRanks(2,
                              [&](int rank, Communicator& c) -> Status {
                                STRATA_ASSIGN_OR_RETURN(const RunConfig settled, testing::TrySettle(cfg, c.world_size()));
                                STRATA_ASSIGN_OR_RETURN(
                                    auto e, Engine::Create(settled, &c, nullptr, ckpt::MakeInitFromHooks(*w, blocks)));
                                for (int s = 0; s < kDecaySteps; ++s) {
                                  STRATA_ASSIGN_OR_RETURN(StepStats st, e->Step(s, **data));
                                  if (rank == 0) losses.push_back(st.loss);
                                }
                                return ckpt::SaveCheckpoint(*e, c, cfg, ck, kDecaySteps);
                              }),
            "");
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

INSTANTIATE_TEST_SUITE_P(Models, HfDecayGroups, ::testing::Values("gpt2", "llama", "phi3", "phi4", "gemma2", "gemma3", "mixtral", "qwen3moe", "olmoe"));

}  // namespace
}  // namespace strata
