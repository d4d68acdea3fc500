// Lion, Adagrad, LAMB and Muon (Note [Optimizer rules]) as users compare them: a LLaMA written by
// transformers, trained by Strata for 20 fp32 steps on 2 ranks (ZeRO-3, so each rank's
// optimizer range cuts the blocks; parameters and optimizer states on NVMe) with Trainer's
// decay groups and exported, against transformers trained by the reference optimizer on the
// same batches (optimizer_peers.py: torch.optim.Adagrad, DeepSpeedCPULion's kernel and FusedLamb's
// formula in torch; LAMB's trust ratios are over whole tensors, which ZeRO-3 cuts across ranks;
// torch.optim.Muon + AdamW and DeepSpeed's MuonWithAuxAdam, whose matrices are orthogonalised whole):
// every loss and every weight tensor within 1e-5 relative, and a run that decays everything
// is not as close. A checkpoint records whose states it holds: resuming one under another
// optimizer is refused by name.
#include <gtest/gtest.h>

#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/ckpt_test_util.h"
#include "hf/hf_peers.h"
#include "hf/one_window.h"
#include "src/checkpoint/checkpoint.h"
#include "src/hf/export.h"
#include "support/cli_run.h"
#include "support/settled.h"
#include "support/temp_dir.h"

namespace strata {
namespace {

constexpr int kOptimizerSteps = 20;
constexpr int kOptimizerSeq = 32;
constexpr const char* kLambClamp = R"(, "min_coeff": 0.0001)";  // as optimizer_peers.py's FusedLambFormula
// Muon's half its own lr (optimizer_peers.py's MUON_LR), AdamW's the case's.
constexpr const char* kMuonTorch = R"(, "muon_lr": 0.02, "ns_method": "torch")";
constexpr const char* kMuonGram = R"(, "muon_lr": 0.02)";

struct OptimizerCase {
  const char* type;  // optimizer.type as the config spells it
  const char* name;  // optimizer_peers.py's
  double lr;
  const char* arch = "llama";  // hf_models.py make's
  // LAMB: a clamp below its default 0.01, which every small-init weight's ratio (about 0.006 at
  // the first steps) would sit at, so that the ratios are what the test compares.
  const char* extra_params = "";
};
void PrintTo(const OptimizerCase& c, std::ostream* os) { *os << c.type << " " << c.arch; }

class HfOptimizers : public ::testing::TestWithParam<OptimizerCase> {
 protected:
  void SetUp() override { testing::RequireHfPeers("", "torch + transformers + safetensors"); }
};

TEST_P(HfOptimizers, MatchTheirReferenceWithTrainersGroups) {
  const OptimizerCase c = GetParam();
  testing::TempDir dir;
  const std::string hf = dir.path() + "/" + c.arch;
  std::string out;
  ASSERT_EQ(testing::RunHfModels(std::string("make ") + c.arch + " " + hf, &out), 0) << out;
  auto parsed = ParseTrainConfig(R"({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0,
      "bf16": {"enabled": false}, "zero_optimization": {"stage": 3},
      "optimizer": {"type": ")" + std::string(c.type) + R"(", "params": {"lr": )" + nlohmann::json(c.lr).dump() +
                                 R"(, "weight_decay": 0.1)" + c.extra_params + R"(}},
      "strata": {"model": {"from": )" + nlohmann::json(hf).dump() + R"(, "seq_len": 32}}})", "test");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  TrainConfig cfg = *parsed;
  testing::TrainOnOneWindow(dir.path(), kOptimizerSeq, 5, &cfg);
  const std::string ck = dir.path() + "/ckpt", exported = dir.path() + "/export";
  std::vector<double> losses;
  ASSERT_EQ(testing::TrainTwoRanksFromFolder(cfg, hf, kOptimizerSteps, ck, "", &losses), "");
  auto ex = ckpt::ExportHfFolder(ck, exported, {ckpt::ExportDType::kF32, 100'000, ""});
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  const std::string losses_file = dir.path() + "/losses.json";
  std::ofstream(losses_file) << nlohmann::json(losses).dump();
  const int rc = testing::RunHfModels(fmt::format("optimizer {} {}:{} {} {} {} 0.1 {} {}", hf, cfg.data.path,
                                                  kOptimizerSeq + 1, kOptimizerSteps, c.name, c.lr, exported,
                                                  losses_file),
                                      &out);
  std::printf("[ %s ] %s", c.type, out.c_str());
  EXPECT_EQ(rc, 0) << out;

  // The checkpoint says whose states it holds; AdamW cannot resume them.
  nlohmann::json manifest;
  std::ifstream(ck + "/" + ckpt::StepDirName(kOptimizerSteps) + "/manifest.json") >> manifest;
  const std::string name = c.name;
  EXPECT_EQ(manifest.value("optimizer", ""), name.substr(0, name.find('_')));  // (muon_torch: "muon")
  TrainConfig adam = cfg;
  adam.optimizer = OptimizerKind::kAdam;
  const std::string err = testing::RunRanks(2, [&](int, Communicator& comm) -> Status {
    STRATA_ASSIGN_OR_RETURN(const RunConfig settled, testing::TrySettle(adam, comm.world_size()));
    STRATA_ASSIGN_OR_RETURN(auto e, Engine::Create(settled, &comm, nullptr));
    return ckpt::LoadCheckpoint(*e, comm, adam, ck).status();
  });
  EXPECT_NE(err.find(fmt::format("holds the states of {}; this run's optimizer.type is AdamW", c.type)),
            std::string::npos) << err;
}

INSTANTIATE_TEST_SUITE_P(Optimizers, HfOptimizers,
                         ::testing::Values(OptimizerCase{"Lion", "lion", 1e-4}, OptimizerCase{"Adagrad", "adagrad", 1e-2},
                                           OptimizerCase{"Lamb", "lamb", 1e-2, "llama", kLambClamp},
                                           // transformers fuses q/k/v and gate/up (Phi-3) and a layer's
                                           // experts: LAMB's ratio is over each fused tensor
                                           OptimizerCase{"Lamb", "lamb", 1e-2, "phi3", kLambClamp},
                                           OptimizerCase{"Lamb", "lamb", 1e-2, "mixtral", kLambClamp},
                                           OptimizerCase{"Muon", "muon_torch", 1e-3, "llama", kMuonTorch},
                                           OptimizerCase{"Muon", "muon_deepspeed", 1e-3, "llama", kMuonGram}),
                         [](const auto& info) {
                           const std::string arch = info.param.arch;
                           const std::string name = info.param.name;
                           const size_t cut = name.find('_');
                           return std::string(info.param.type) + (arch == "llama" ? "" : "_" + arch) +
                                  (cut == std::string::npos ? "" : name.substr(cut));
                         });

}  // namespace
}  // namespace strata
