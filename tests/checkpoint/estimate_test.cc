// The estimator's per-rank bytes against what the engine allocates (Engine::ledger()), for
// the shipped tiny config and variations of stage, offload, precision and architecture.
#include "src/estimate/estimator.h"

#include <gtest/gtest.h>

#include "ckpt_test_util.h"
#include "support/temp_dir.h"

namespace strata {
namespace {

void ExpectEstimateMatchesLedger(const TrainConfig& cfg, int world) {
  const MemoryEstimate e = EstimateMemory(cfg, world);
  MemoryLedger measured;
  ASSERT_EQ(testing::RunRanks(world,
                              [&](int r, Communicator& c) -> Status {
                                STRATA_ASSIGN_OR_RETURN(auto eng, Engine::Create(cfg, &c, nullptr));
                                if (r == 0) measured = eng->ledger();
                                return Status();
                              }),
            "");
  for (int k = 0; k < kNumStateKinds; ++k)
    for (int t = 0; t < 3; ++t) {
      EXPECT_EQ(e.ledger.bytes[k][t], measured.bytes[k][t]) << "state kind " << k << ", tier " << t;
    }
  for (Residence r : {Residence::kDevice, Residence::kCpu, Residence::kNvme})
    std::printf("  tier %d: estimated %llu B, measured %llu B\n", static_cast<int>(r),
                (unsigned long long)e.ledger.Total(r), (unsigned long long)measured.Total(r));
}

TEST(Estimate, TinyConfigMatchesTheEngineLedger) {
  testing::TempDir dir;
  auto cfg = LoadTrainConfig(STRATA_SOURCE_DIR "/configs/tiny_cpu.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  cfg->offload_param.nvme_path = cfg->offload_optimizer.nvme_path = dir.path();
  ExpectEstimateMatchesLedger(*cfg, 2);
}

TEST(Estimate, StagesOffloadsAndLlamaMatchTheEngineLedger) {
  testing::TempDir dir;
  auto cfg = LoadTrainConfig(STRATA_SOURCE_DIR "/configs/tiny_cpu.json");
  ASSERT_TRUE(cfg.ok());
  cfg->offload_param.nvme_path = cfg->offload_optimizer.nvme_path = dir.path();
  cfg->sub_group_size = 20000;  // several sub-groups per block
  for (int stage : {1, 2}) {
    TrainConfig c = *cfg;
    c.zero_stage = stage;
    c.offload_param.device = OffloadDevice::kNone;
    c.offload_optimizer.device = OffloadDevice::kCpu;
    ExpectEstimateMatchesLedger(c, 2);
  }
  TrainConfig llama = *cfg;
  llama.model.arch = model::Arch::kLlama;
  llama.model.n_kv_head = 2;
  llama.model.tie_embeddings = false;
  llama.compute_dtype = DType::kF16;
  ExpectEstimateMatchesLedger(llama, 1);
}

TEST(Estimate, RefusesWhatDoesNotFitWithTheNumbers) {
  auto cfg = LoadTrainConfig(STRATA_SOURCE_DIR "/configs/llama_1b_nvme.json");
  ASSERT_TRUE(cfg.ok());
  const MemoryEstimate e = EstimateMemory(*cfg, 1);
  MachineCapacity small;
  small.host_available = 1'000'000'000;
  small.nvme_free = 2'000'000'000;
  small.nvme_dir = "/x";
  const Status s = CheckFits(e, small, 1);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("NVMe"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("host memory"), std::string::npos) << s.message();
  MachineCapacity big{1ull << 50, 1ull << 50, "/x"};
  EXPECT_TRUE(CheckFits(e, big, 1).ok());
}

}  // namespace
}  // namespace strata
