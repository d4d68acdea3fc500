// Hugging Face transformers interop (needs the Python peers: torch + transformers in
// STRATA_PYTHON; skipped with the reason otherwise). For a GPT-2 and a LLaMA model written
// by transformers (random init from a small config, save_pretrained):
//   1. --init-from loads it, and Strata's fp32 logits on the same tokens match
//      transformers' within kLogitTolerance;
//   2. an engine started from it, checkpointed and exported, gives back the same tensors
//      bitwise, and transformers loads that export and reproduces its own logits
//      (hf_models.py's tolerance, 1e-4).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "ckpt_test_util.h"
#include "src/checkpoint/checkpoint.h"
#include "src/checkpoint/export.h"
#include "src/checkpoint/hf_loader.h"
#include "src/checkpoint/safetensors.h"
#include "support/temp_dir.h"

namespace strata {
namespace {

constexpr double kLogitTolerance = 1e-4;  // fp32 both sides; different matmul/attention kernels
const std::string kScript = STRATA_SOURCE_DIR "/tests/checkpoint/hf_models.py";

int Python(const std::string& args, std::string* out = nullptr) {
  const std::string cmd = std::string(STRATA_PYTHON) + " " + kScript + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  const int rc = pclose(p);
  if (out) *out = text;
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

class HuggingFace : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string out;
    if (Python("check", &out) != 0)
      GTEST_SKIP() << "Python peers not installed (" << STRATA_PYTHON
                   << " cannot import torch + transformers + safetensors; run scripts/setup_hf.sh): " << out;
  }
};

TrainConfig ConfigFor(const std::string& model_json, const std::string& nvme) {
  std::ifstream in(model_json);
  std::stringstream ss;
  ss << in.rdbuf();
  auto c = ParseTrainConfig(R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3},
      "strata": {"model": )" + ss.str() + "}}",
                            model_json);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  c->offload_param.nvme_path = c->offload_optimizer.nvme_path = nvme;
  return *c;
}

TEST_P(HuggingFace, InitFromMatchesTransformersLogitsAndExportLoadsBack) {
  testing::TempDir dir;
  const std::string hf = dir.path() + "/" + GetParam();
  std::string out;
  ASSERT_EQ(Python("make " + GetParam() + " " + hf, &out), 0) << out;
  const TrainConfig cfg = ConfigFor(hf + "/strata_model.json", dir.path());
  const model::ModelSpec spec(cfg.model);

  // 1. Logits of a plain FullModel loaded through the --init-from loader.
  auto w = ckpt::HfWeights::Open(hf + "/model.safetensors", cfg.model);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  model::FullModel full(spec);
  ASSERT_TRUE(ckpt::LoadIntoModel(**w, full).ok());
  auto ref = ckpt::SafetensorsFile::Open(hf + "/reference.safetensors");
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  const ckpt::TensorView* tok = ref->Find("tokens");
  const ckpt::TensorView* want = ref->Find("logits");
  ASSERT_TRUE(tok && want);
  torch::Tensor tokens = torch::from_blob(const_cast<std::byte*>(tok->bytes.data()), tok->shape, torch::kInt64).clone();
  torch::Tensor expected =
      torch::from_blob(const_cast<std::byte*>(want->bytes.data()), want->shape, torch::kFloat32).clone();
  torch::NoGradGuard no_grad;
  const double diff = (full.Forward(tokens) - expected).abs().max().item<double>();
  std::printf("[ %s ] max |Strata logits - transformers logits| = %.3g (tolerance %.0e)\n", GetParam().c_str(), diff,
              kLogitTolerance);
  EXPECT_LE(diff, kLogitTolerance);

  // 2. Engine (2 ranks, fp32) from the file -> checkpoint -> export: the same tensors.
  const std::string ck = dir.path() + "/ckpt", exported = dir.path() + "/export.safetensors";
  ASSERT_EQ(testing::RunRanks(2,
                              [&](int, Communicator& c) -> Status {
                                STRATA_ASSIGN_OR_RETURN(auto e, Engine::Create(cfg, &c, nullptr,
                                                                               ckpt::MakeInitFromHooks(*w, spec.num_blocks())));
                                return ckpt::SaveCheckpoint(*e, c, cfg, ck, 0);
                              }),
            "");
  auto ex = ckpt::ExportCheckpoint(ck, exported, ckpt::ExportDType::kF32);
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  auto a = ckpt::SafetensorsFile::Open(hf + "/model.safetensors");
  auto b = ckpt::SafetensorsFile::Open(exported);
  ASSERT_TRUE(a.ok() && b.ok());
  int compared = 0;
  for (const ckpt::TensorView& t : a->tensors()) {
    if (t.name == "lm_head.weight" && cfg.model.tie_embeddings) continue;
    const ckpt::TensorView* u = b->Find(t.name);
    ASSERT_TRUE(u) << t.name << " missing from the export";
    EXPECT_EQ(t.shape, u->shape) << t.name;
    EXPECT_TRUE(t.bytes.size() == u->bytes.size() && std::memcmp(t.bytes.data(), u->bytes.data(), t.bytes.size()) == 0)
        << t.name << " differs";
    ++compared;
  }
  EXPECT_EQ(compared, ex->tensors);
  ASSERT_EQ(Python("logits " + hf + " " + exported, &out), 0) << out;
  const size_t at = out.rfind("max |");
  std::printf("[ %s ] transformers on Strata's export: %s", GetParam().c_str(),
              at == std::string::npos ? out.c_str() : out.c_str() + at);
}

INSTANTIATE_TEST_SUITE_P(Models, HuggingFace, ::testing::Values("gpt2", "llama"));

}  // namespace
}  // namespace strata
