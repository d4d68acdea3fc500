// Hugging Face transformers interop (needs the Python peers: torch + transformers in
// STRATA_PYTHON; skipped with the reason otherwise). For a GPT-2, LLaMA (3.1 rope scaling),
// Mistral (sliding window), Qwen2 (q/k/v biases), Qwen3 (q/k norms, head_dim != C / H) and
// Phi-3 (q/k/v and gate/up fused in HF tensors)
// model written by transformers (random init, norms and biases perturbed, save_pretrained
// in 3 or more shards with model.safetensors.index.json):
//   1. strata.model.from reads the architecture from config.json and --init-from DIR loads the
//      shards; Strata's fp32 logits on the same tokens match transformers' within
//      kLogitTolerance;
//   2. an engine started from the folder, checkpointed and exported as a folder (3 or more
//      shards again), gives back the same tensors bitwise with the tokenizer files copied,
//      and transformers' from_pretrained on that folder reproduces its own logits
//      (hf_models.py's tolerance, 1e-4).
#include <gtest/gtest.h>


#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "checkpoint/ckpt_test_util.h"
#include "src/checkpoint/checkpoint.h"
#include "src/hf/export.h"
#include "src/hf/hf_loader.h"
#include "src/checkpoint/safetensors.h"
#include "hf/folder_tensors.h"
#include "hf/hf_peers.h"
#include "support/temp_dir.h"
#include "support/settled.h"

namespace strata {
namespace {
namespace fs = std::filesystem;

constexpr double kLogitTolerance = 1e-4;  // fp32 both sides; different matmul/attention kernels


std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class HuggingFace : public testing::HfPeersTest {};

// The run's config: the architecture from the folder (strata.model.from), sequences of 32.
TrainConfig ConfigFrom(const std::string& folder, const std::string& nvme) {
  auto c = ParseTrainConfig(R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3},
      "strata": {"model": {"from": )" + nlohmann::json(folder).dump() + R"(, "seq_len": 32}}})",
                            "test");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  c->offload_param.nvme_path = c->offload_optimizer.nvme_path = nvme;
  return *c;
}

int CountShards(const std::string& folder) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(folder))
    if (e.path().filename().string().rfind("model-", 0) == 0 && e.path().extension() == ".safetensors") ++n;
  return n;
}

TEST_P(HuggingFace, FolderInMatchesTransformersLogitsAndFolderOutLoadsBack) {
  testing::TempDir dir;
  const std::string hf = dir.path() + "/" + GetParam();
  std::string out;
  ASSERT_EQ(testing::RunHfModels("make " + GetParam() + " " + hf, &out), 0) << out;
  ASSERT_GE(CountShards(hf), 3);
  const TrainConfig cfg = ConfigFrom(hf, dir.path());
  const model::ModelSpec spec(cfg.model);

  // 1. Logits of a plain FullModel loaded through the --init-from loader, shard by shard.
  auto w = ckpt::HfWeights::Open(hf, cfg.model);
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
  std::printf("[ %s ] --init-from DIR: max |Strata logits - transformers logits| = %.3g (tolerance %.0e)\n",
              GetParam().c_str(), diff, kLogitTolerance);
  EXPECT_LE(diff, kLogitTolerance);

  // 2. Engine (2 ranks, fp32) from the folder -> checkpoint -> export as a folder.
  const std::string ck = dir.path() + "/ckpt", exported = dir.path() + "/export";
  ASSERT_EQ(testing::RunRanks(2,
                              [&](int, Communicator& c) -> Status {
                                STRATA_ASSIGN_OR_RETURN(const RunConfig settled, testing::TrySettle(cfg, c.world_size()));
                                STRATA_ASSIGN_OR_RETURN(auto e, Engine::Create(settled, &c, nullptr,
                                                                               ckpt::MakeInitFromHooks(*w, spec.num_blocks())));
                                return ckpt::SaveCheckpoint(*e, c, cfg, ck, 0);
                              }),
            "");
  auto ex = ckpt::ExportHfFolder(ck, exported, {ckpt::ExportDType::kF32, 100'000, ""});
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  EXPECT_GE(ex->shards, 3);
  EXPECT_EQ(ex->shards, CountShards(exported));
  EXPECT_EQ(ex->source, hf);  // recorded by the checkpoint
  for (const char* f : {"tokenizer_config.json", "special_tokens_map.json", "generation_config.json"}) {
    ASSERT_TRUE(fs::exists(exported + "/" + f)) << f;
    EXPECT_EQ(Slurp(exported + "/" + f), Slurp(hf + "/" + f)) << f;
  }
  for (const auto& e : fs::directory_iterator(fs::path(exported).parent_path()))  // no temporary left
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  std::vector<ckpt::SafetensorsFile> fa, fb;
  const auto a = testing::FolderTensors(hf, &fa), b = testing::FolderTensors(exported, &fb);
  int compared = 0;
  for (const auto& [name, t] : a) {
    if (name == "lm_head.weight" && cfg.model.tie_embeddings) continue;
    auto u = b.find(name);
    ASSERT_TRUE(u != b.end()) << name << " missing from the export";
    EXPECT_EQ(t->shape, u->second->shape) << name;
    EXPECT_TRUE(t->bytes.size() == u->second->bytes.size() &&
                std::memcmp(t->bytes.data(), u->second->bytes.data(), t->bytes.size()) == 0)
        << name << " differs";
    ++compared;
  }
  EXPECT_EQ(compared, ex->tensors);
  EXPECT_EQ(b.size(), static_cast<size_t>(ex->tensors));
  const int rc = testing::RunHfModels("logits " + hf + " " + exported, &out);
  const size_t at = out.rfind("max |");
  std::printf("[ %s ] export --out DIR, transformers' from_pretrained: %s", GetParam().c_str(),
              at == std::string::npos ? out.c_str() : out.c_str() + out.rfind('\n', at) + 1);
  EXPECT_EQ(rc, 0) << out;
}

INSTANTIATE_TEST_SUITE_P(Models, HuggingFace, ::testing::Values("gpt2", "llama", "mistral", "qwen2", "qwen3", "phi3", "phi4", "gemma2", "gemma3", "mixtral", "qwen3moe", "olmoe"));

}  // namespace
}  // namespace strata
