// LoRA exports against peft and transformers (needs the Python peers with peft; skipped with
// the reason otherwise). For a LLaMA (3.1 rope scaling, GQA, untied), Qwen2 (q/k/v biases,
// tied), Qwen3 (q/k norms), Gemma 2 (soft-capped, tied), Qwen3-MoE, Mixtral and Phi-3 model
// written by transformers, Strata fine-tunes rank-4 adapters on all seven projections (a
// mixture of experts': its attention's and its experts' fused tensors, PEFT's
// target_parameters; Phi-3's: qkv_proj, o_proj, gate_up_proj, down_proj) from the
// folder (strata.model.from, fp32 compute, 2 ranks, 5 steps),
// and `strata export` writes the PEFT adapter folder and the merged model folder. Then
//   (a) peft.PeftModel.from_pretrained(the folder's model, the adapter) gives Strata's own
//       logits (FullModel with the adapters: the base from the folder, the adapters from the
//       engine's masters) within hf_models.py's tolerance (1e-4), and
//   (b) the merged folder, loaded by AutoModelForCausalLM, gives the PeftModel's logits;
// the adapters must move the base's logits by far more than the tolerance, so (a) and (b)
// compare something.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "checkpoint/ckpt_test_util.h"
#include "support/cli_run.h"
#include "hf/hf_peers.h"
#include "src/checkpoint/checkpoint.h"
#include "src/hf/hf_loader.h"
#include "src/checkpoint/safetensors.h"
#include "support/temp_dir.h"
#include "support/settled.h"

namespace strata {
namespace {
namespace fs = std::filesystem;

class PeftVsStrata : public testing::HfPeftTest {};

// The folder's architecture, adapters on every projection (a mixture of experts': on its
// attention and its experts; Phi-3's: on its fused ones), fp32, sequences of 32.
TrainConfig LoraFrom(const std::string& folder, const std::string& nvme, const std::string& arch) {
  const std::string targets =
      arch == "qwen3moe" || arch == "mixtral"
          ? R"(["q_proj", "k_proj", "v_proj", "o_proj"],
               "target_parameters": ["experts.gate_up_proj", "experts.down_proj"])"
      : arch == "phi3" ? R"(["qkv_proj", "o_proj", "gate_up_proj", "down_proj"])"
                       : R"(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])";
  auto c = ParseTrainConfig(R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3},
      "bf16": {"enabled": false},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.02, "weight_decay": 0.0}},
      "strata": {"model": {"from": )" + nlohmann::json(folder).dump() + R"(, "seq_len": 32},
                 "lora": {"r": 4, "alpha": 8, "target_modules": )" + targets + R"(}}})",
                            "test");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  c->offload_param.nvme_path = c->offload_optimizer.nvme_path = nvme;
  return *c;
}

TEST_P(PeftVsStrata, AdapterAndMergedFolderGiveStrataLogits) {
  testing::TempDir dir;
  const std::string hf = dir.path() + "/" + GetParam();
  std::string out;
  ASSERT_EQ(testing::RunHfModels("make " + GetParam() + " " + hf, &out), 0) << out;
  const TrainConfig cfg = LoraFrom(hf, dir.path(), GetParam());
  ASSERT_EQ(cfg.compute_dtype, DType::kF32);
  const model::ModelSpec spec(cfg.model);
  auto w = ckpt::HfWeights::Open(hf, cfg.model);
  ASSERT_TRUE(w.ok()) << w.status().ToString();

  // Fine-tune the adapters (2 ranks, 5 steps) and keep the engine's masters.
  const std::string ck = dir.path() + "/ckpt";
  testing::Params master;
  ASSERT_EQ(testing::RunRanks(2,
                              [&](int rank, Communicator& c) -> Status {
                                STRATA_ASSIGN_OR_RETURN(auto data, data::TokenDataset::Open(cfg.data, cfg.model.vocab_size,
                                                                                            cfg.model.seq_len));
                                EngineHooks hooks = ckpt::MakeInitFromHooks(*w, spec.num_blocks());
                                STRATA_ASSIGN_OR_RETURN(const RunConfig settled, testing::TrySettle(cfg, c.world_size()));
                                STRATA_ASSIGN_OR_RETURN(auto e, Engine::Create(settled, &c, nullptr, std::move(hooks)));
                                for (int64_t s = 0; s < 5; ++s) STRATA_RETURN_IF_ERROR(e->Step(s, *data).status());
                                STRATA_RETURN_IF_ERROR(ckpt::SaveCheckpoint(*e, c, cfg, ck, 5));
                                return testing::CollectMaster(*e, rank, &master);
                              }),
            "");

  // Strata's logits with the adapters: the base from the folder, the adapters from the masters.
  model::FullModel full(spec);
  {
    torch::NoGradGuard no_grad;
    for (size_t b = 0; b < full.blocks().size(); ++b) {
      std::vector<std::pair<std::string, torch::Tensor>> base;
      std::map<std::string, torch::Tensor> adapters;
      for (const auto& item : full.blocks()[b]->named_parameters(true)) {
        if (model::IsAdapterName(item.key())) adapters[item.key()] = item.value().detach();
        else base.push_back({item.key(), item.value().detach()});
      }
      ASSERT_TRUE((*w)->FillBlock(static_cast<int>(b), base).ok());
      for (const auto& [name, value] : master[b])
        if (model::IsAdapterName(name)) adapters.at(name).copy_(value);
    }
  }
  auto ref = ckpt::SafetensorsFile::Open(hf + "/reference.safetensors");
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  const ckpt::TensorView* tok = ref->Find("tokens");
  ASSERT_TRUE(tok);
  torch::Tensor tokens = torch::from_blob(const_cast<std::byte*>(tok->bytes.data()), tok->shape, torch::kInt64).clone();
  torch::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    logits = full.Forward(tokens).contiguous();
  }
  const std::string strata_logits = dir.path() + "/strata_logits.safetensors";
  ASSERT_TRUE(ckpt::WriteSafetensors(
                  strata_logits,
                  {{"tokens", "I64", tok->shape, tok->bytes},
                   {"logits", "F32", logits.sizes().vec(),
                    std::span(static_cast<const std::byte*>(logits.data_ptr()), logits.nbytes())}},
                  {})
                  .ok());

  // The two exports through the command line.
  const std::string adapter = dir.path() + "/adapter", merged = dir.path() + "/merged";
  testing::CliRun r = testing::RunStrata("export " + ck + " --out " + adapter);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = testing::RunStrata("export " + ck + " --out " + merged + " --merge-lora --max-shard-size 100KB");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::ifstream in(adapter + "/adapter_config.json");
  const nlohmann::json ac = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  EXPECT_EQ(ac.value("base_model_name_or_path", ""), fs::absolute(hf).lexically_normal().string());
  EXPECT_TRUE(fs::exists(merged + "/tokenizer_config.json"));  // copied from the source, as for any export

  const int rc = testing::RunHfModels("peft " + hf + " " + adapter + " " + strata_logits + " " + merged, &out);
  const size_t at = out.rfind("PeftModel:");
  std::printf("[ %s ] %s", GetParam().c_str(), at == std::string::npos ? out.c_str() : out.c_str() + at);
  EXPECT_EQ(rc, 0) << out;
}

INSTANTIATE_TEST_SUITE_P(Models, PeftVsStrata, ::testing::Values("llama", "qwen2", "qwen3", "gemma2", "qwen3moe", "mixtral",
                                                                 "phi3"));

}  // namespace
}  // namespace strata
