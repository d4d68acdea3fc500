// LoRA checkpoints out (strata.lora, issue 17). `export` writes the adapters as a PEFT adapter
// folder (PEFT's names and shapes, the engine's fp32 master values bitwise, an
// adapter_config.json with the run's r, alpha and targets) or, with --merge-lora, the merged
// model, whose weights equal base + alpha/r * B @ A computed here from the engine's own values
// (the base from an engine without adapters, rounded to the compute dtype, since a LoRA run
// keeps no fp32 base). On 1 and 2 ranks, ZeRO stage 2 and 3, with the working weights on the
// device, in host memory and on NVMe (where a block's trainable end is its own "adapter"
// tensor). Misuse is an error that names the flag to use, through the library and the CLI.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "engine/engine_test_util.h"
#include "checkpoint/ckpt_test_util.h"
#include "support/cli_run.h"
#include "src/checkpoint/checkpoint.h"
#include "src/hf/export.h"
#include "src/checkpoint/manifest.h"
#include "src/checkpoint/safetensors.h"
#include "support/settled.h"

namespace strata {
namespace {
namespace fs = std::filesystem;
using testing::Params;
using testing::RunRanks;
using testing::TempDir;

// merged = base + scale * B @ A is summed in fp32 by export and in double here; the weights
// are ~0.02 and the deltas smaller, so the two agree to a few fp32 ulps.
constexpr double kMergeTolerance = 1e-6;

const std::vector<std::string> kTargets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

// A tiny LLaMA (GQA, untied head) with rank-4 adapters on every projection.
TrainConfig LoraCfg(const std::string& dir, bool lora = true) {
  TrainConfig c = testing::TinyConfig(dir);
  c.model.arch = model::Arch::kLlama;
  c.model.n_kv_head = 2;
  c.model.tie_embeddings = false;
  c.lr = 0.01;
  if (lora) {
    c.model.lora.r = 4;
    c.model.lora.alpha = 8;
    c.model.lora.target_modules = kTargets;
  }
  return c;
}

// Trains `steps` steps on `world` ranks, saves to `ck` (if given); rank 0's master weights.
Params Train(const TrainConfig& cfg, int world, int64_t steps, const std::string& ck) {
  Params master;
  EXPECT_EQ(RunRanks(world,
                     [&](int rank, Communicator& comm) -> Status {
                       STRATA_ASSIGN_OR_RETURN(auto data, data::TokenDataset::Open(cfg.data, cfg.model.vocab_size,
                                                                                   cfg.model.seq_len));
                       STRATA_ASSIGN_OR_RETURN(const RunConfig settled, testing::TrySettle(cfg, comm.world_size()));
                       STRATA_ASSIGN_OR_RETURN(auto e, Engine::Create(settled, &comm, nullptr));
                       for (int64_t s = 0; s < steps; ++s) STRATA_RETURN_IF_ERROR(e->Step(s, *data).status());
                       if (!ck.empty()) STRATA_RETURN_IF_ERROR(ckpt::SaveCheckpoint(*e, comm, cfg, ck, steps));
                       return testing::CollectMaster(*e, rank, &master);
                     }),
            "");
  return master;
}

// Every tensor of the safetensors files directly in `path` (a file or a folder), by name.
std::map<std::string, torch::Tensor> ReadTensors(const std::string& path) {
  std::vector<std::string> files;
  if (fs::is_directory(path)) {
    for (const auto& e : fs::directory_iterator(path))
      if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
  } else {
    files.push_back(path);
  }
  std::map<std::string, torch::Tensor> out;
  for (const std::string& f : files) {
    auto st = ckpt::SafetensorsFile::Open(f);
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    if (!st.ok()) continue;
    for (const ckpt::TensorView& t : st->tensors()) {
      EXPECT_EQ(t.dtype, "F32") << t.name;
      out[t.name] = torch::from_blob(const_cast<std::byte*>(t.bytes.data()), t.shape, torch::kFloat32).clone();
    }
  }
  return out;
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// Hugging Face's name of a LLaMA parameter of block b.
std::string HfName(int b, int n_layer, const std::string& name) {
  if (b == 0) return "model.embed_tokens.weight";
  if (b == n_layer + 1) return name == "lm_head.weight" ? name : "model." + name;
  return "model.layers." + std::to_string(b - 1) + "." + name;
}

// Whether any rank file of the checkpoint holds a split-off trainable end ("block<b>.adapter").
bool HasAdapterTensor(const std::string& ck) {
  auto step = ckpt::ResolveStepDir(ck);
  EXPECT_TRUE(step.ok());
  for (const auto& e : fs::directory_iterator(*step)) {
    if (e.path().extension() != ".safetensors") continue;
    auto f = ckpt::SafetensorsFile::Open(e.path().string());
    EXPECT_TRUE(f.ok());
    for (const ckpt::TensorView& t : f->tensors())
      if (t.name.ends_with(".adapter")) return true;
  }
  return false;
}

struct Case {
  int world;
  int stage;
  Tier param;  // offload_param and offload_optimizer
  DType compute;
  bool adapter_tensor;  // the checkpoint has "block<b>.adapter" tensors (the base on NVMe)
};

TEST(LoraExport, PeftAdapterIsTheMastersAndMergedIsBasePlusScaledProduct) {
  const Case cases[] = {
      {1, 3, Tier::kDevice, DType::kF32, false}, {1, 3, Tier::kCpu, DType::kBF16, false},
      {1, 3, Tier::kNvme, DType::kBF16, true}, {2, 2, Tier::kDevice, DType::kBF16, false},
      {2, 3, Tier::kCpu, DType::kF32, false},  {2, 3, Tier::kNvme, DType::kBF16, true},
  };
  TempDir dir;
  // The base without adapters: the same seeded weights (adapters draw from their own generator).
  const Params base = Train(LoraCfg(dir.path(), /*lora=*/false), 1, 0, "");
  for (const Case& k : cases) {
    SCOPED_TRACE(::testing::Message() << k.world << " rank(s), stage " << k.stage << ", offload "
                                      << OffloadDeviceName(k.param) << ", " << DTypeName(k.compute));
    TrainConfig cfg = LoraCfg(dir.path());
    cfg.zero_stage = k.stage;
    cfg.offload_param.device = cfg.offload_optimizer.device = k.param;
    cfg.compute_dtype = k.compute;
    const std::string tag = fmt::format("{}-{}-{}-{}", k.world, k.stage, OffloadDeviceName(k.param), DTypeName(k.compute));
    const std::string ck = dir.path() + "/ck-" + tag, peft = dir.path() + "/peft-" + tag,
                      merged = dir.path() + "/merged-" + tag, file = dir.path() + "/merged-" + tag + ".safetensors";
    const Params master = Train(cfg, k.world, 3, ck);
    ASSERT_EQ(master.size(), base.size());
    EXPECT_EQ(HasAdapterTensor(ck), k.adapter_tensor);

    // PEFT: 2 tensors per adapted projection, PEFT's names, the masters bitwise.
    auto ex = ckpt::ExportPeftAdapter(ck, peft, {});
    ASSERT_TRUE(ex.ok()) << ex.status().ToString();
    const auto adapters = ReadTensors(peft + "/adapter_model.safetensors");
    EXPECT_EQ(adapters.size(), 2 * kTargets.size() * cfg.model.n_layer);
    EXPECT_EQ(ex->tensors, static_cast<int64_t>(adapters.size()));
    int matched = 0;
    for (size_t b = 0; b < master.size(); ++b)
      for (const auto& [name, value] : master[b]) {
        if (!model::IsAdapterName(name)) continue;
        const std::string peft_name = "base_model.model." + HfName(b, cfg.model.n_layer, name) + ".weight";
        auto it = adapters.find(peft_name);
        ASSERT_TRUE(it != adapters.end()) << peft_name << " missing";
        EXPECT_EQ(it->second.sizes(), value.sizes()) << peft_name;
        EXPECT_TRUE(torch::equal(it->second, value)) << peft_name << " differs from the engine's master";
        if (name.ends_with("lora_B")) {
          EXPECT_GT(value.abs().max().item<float>(), 0) << name << " never trained";
        }
        ++matched;
      }
    EXPECT_EQ(matched, static_cast<int>(adapters.size()));
    const nlohmann::json ac = ReadJson(peft + "/adapter_config.json");
    EXPECT_EQ(ac.value("peft_type", ""), "LORA");
    EXPECT_EQ(ac.value("task_type", ""), "CAUSAL_LM");
    EXPECT_EQ(ac.value("r", 0), 4);
    EXPECT_EQ(ac.value("lora_alpha", 0.0), 8.0);
    EXPECT_EQ(ac.value("lora_dropout", -1.0), 0.0);
    EXPECT_EQ(ac.value("target_modules", std::vector<std::string>()), kTargets);
    EXPECT_EQ(ac.value("bias", ""), "none");
    EXPECT_EQ(ac.value("fan_in_fan_out", true), false);
    EXPECT_EQ(ac.value("use_rslora", true), false);
    EXPECT_EQ(ac.value("inference_mode", false), true);
    EXPECT_TRUE(ac.contains("base_model_name_or_path") && ac["base_model_name_or_path"].is_null());  // no --init-from

    // Merged, as a folder and as one file: base + scale * B @ A; everything else the base.
    auto mf = ckpt::ExportHfFolder(ck, merged, {ckpt::ExportDType::kF32, 100'000, "", /*merge_lora=*/true});
    ASSERT_TRUE(mf.ok()) << mf.status().ToString();
    auto m1 = ckpt::ExportCheckpoint(ck, file, ckpt::ExportDType::kF32, /*merge_lora=*/true);
    ASSERT_TRUE(m1.ok()) << m1.status().ToString();
    EXPECT_EQ(ReadJson(merged + "/config.json").count("lora"), 0u);
    const auto folder = ReadTensors(merged), single = ReadTensors(file);
    EXPECT_EQ(folder.size(), single.size());
    const double scale = cfg.model.lora.scale();
    size_t expected_tensors = 0, adapted = 0;
    double worst = 0, largest_delta = 0;
    for (size_t b = 0; b < base.size(); ++b) {
      std::map<std::string, torch::Tensor> trained(master[b].begin(), master[b].end());
      for (const auto& [name, value] : base[b]) {
        ++expected_tensors;
        const std::string hf = HfName(b, cfg.model.n_layer, name);
        ASSERT_TRUE(folder.count(hf)) << hf << " missing from the merged folder";
        ASSERT_TRUE(single.count(hf)) << hf << " missing from the merged file";
        EXPECT_TRUE(torch::equal(folder.at(hf), single.at(hf))) << hf;
        // The base as the run held it: the compute dtype's rounding of the seeded fp32 weights.
        torch::Tensor want = value.to(k.compute == DType::kBF16 ? torch::kBFloat16 : torch::kFloat32).to(torch::kFloat32);
        const std::string module = name.substr(0, name.size() - std::string(".weight").size());
        if (trained.count(module + ".lora_A")) {
          ++adapted;
          const torch::Tensor B = trained.at(module + ".lora_B").to(torch::kFloat64),
                              A = trained.at(module + ".lora_A").to(torch::kFloat64);
          const torch::Tensor delta = scale * B.mm(A);
          largest_delta = std::max(largest_delta, delta.abs().max().item<double>());
          want = (want.to(torch::kFloat64) + delta).to(torch::kFloat32);
          const double diff = (folder.at(hf) - want).abs().max().item<double>();
          worst = std::max(worst, diff);
          EXPECT_LE(diff, kMergeTolerance) << hf;
        } else {
          EXPECT_TRUE(torch::equal(folder.at(hf), want)) << hf << " is not the base";
        }
      }
    }
    EXPECT_EQ(adapted, kTargets.size() * cfg.model.n_layer);
    EXPECT_GT(largest_delta, 1000 * kMergeTolerance);  // the merge changes the weights: the comparison has teeth
    EXPECT_EQ(folder.size(), expected_tensors);
    EXPECT_EQ(mf->tensors, static_cast<int64_t>(expected_tensors));
    std::printf("[ %s ] PEFT adapter = masters bitwise; merged: max |W' - (W + %.0f B A)| = %.3g over %zu projections "
                "(largest |%.0f B A| %.3g)\n", tag.c_str(), scale, worst, adapted, scale, largest_delta);
    // A bf16 run's merged base is bf16-rounded, and the report says so.
    bool noted = false;
    for (const std::string& n : mf->notes) noted = noted || n.find("bf16-rounded") != std::string::npos;
    EXPECT_EQ(noted, k.compute == DType::kBF16);
  }
}

TEST(LoraExport, MisuseNamesTheFlagAndNothingIsWritten) {
  TempDir dir;
  const std::string ck = dir.path() + "/lora", plain = dir.path() + "/plain";
  Train(LoraCfg(dir.path()), 1, 1, ck);
  Train(LoraCfg(dir.path(), /*lora=*/false), 1, 1, plain);
  ASSERT_TRUE(ckpt::CheckpointLora(ck)->enabled());
  ASSERT_FALSE(ckpt::CheckpointLora(plain)->enabled());

  const std::string file = dir.path() + "/x.safetensors", folder = dir.path() + "/x";
  auto f = ckpt::ExportCheckpoint(ck, file, ckpt::ExportDType::kF32);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().ToString().find("--merge-lora"), std::string::npos) << f.status().ToString();
  EXPECT_FALSE(fs::exists(file));
  auto d = ckpt::ExportHfFolder(ck, folder, {});
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().ToString().find("--merge-lora"), std::string::npos) << d.status().ToString();
  EXPECT_FALSE(fs::exists(folder));
  auto p = ckpt::ExportPeftAdapter(plain, folder, {});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().ToString().find("has no LoRA adapters"), std::string::npos) << p.status().ToString();
  EXPECT_FALSE(fs::exists(folder));

  // A model folder is not replaced by an adapter folder; an earlier adapter export is.
  const std::string model_dir = dir.path() + "/model";
  ASSERT_TRUE(ckpt::ExportHfFolder(plain, model_dir, {}).ok());
  auto over = ckpt::ExportPeftAdapter(ck, model_dir, {});
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().ToString().find("is a model folder written by strata export, not a PEFT adapter folder"),
            std::string::npos) << over.status().ToString();
  EXPECT_TRUE(fs::exists(model_dir + "/config.json"));
  EXPECT_FALSE(fs::exists(model_dir + "/adapter_config.json"));
  for (const auto& e : fs::directory_iterator(dir.path()))  // no temporary left
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  ASSERT_TRUE(ckpt::ExportPeftAdapter(ck, folder, {}).ok());
  ASSERT_TRUE(ckpt::ExportPeftAdapter(ck, folder, {ckpt::ExportDType::kBF16, ""}).ok());
  auto st = ckpt::SafetensorsFile::Open(folder + "/adapter_model.safetensors");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->tensors().front().dtype, "BF16");
}

// The command line: a folder gets the PEFT adapter, --merge-lora the merged model, a
// .safetensors without it and --merge-lora on a plain checkpoint are errors naming the flag;
// generate runs a LoRA checkpoint (merged on the way).
TEST(LoraExport, CommandLine) {
  TempDir dir;
  const std::string ck = dir.path() + "/lora", plain = dir.path() + "/plain";
  TrainConfig cfg = LoraCfg(dir.path());
  cfg.compute_dtype = DType::kBF16;
  Train(cfg, 1, 2, ck);
  Train(LoraCfg(dir.path(), /*lora=*/false), 1, 1, plain);

  testing::CliRun r = testing::RunStrata("export " + ck + " --out " + dir.path() + "/adapter");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("exported the LoRA adapter of"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("adapter_config.json: LORA, r 4, alpha 8 on q_proj"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("of 14 projections"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("base_model_name_or_path is null"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir.path() + "/adapter/adapter_model.safetensors"));

  r = testing::RunStrata("export " + ck + " --out " + dir.path() + "/merged --merge-lora --dtype bf16");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("merged the LoRA adapters (r 4, alpha 8 on q_proj"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("into 14 projections: W + 2 * B @ A"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bf16-rounded"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir.path() + "/merged/config.json"));

  r = testing::RunStrata("export " + ck + " --out " + dir.path() + "/m.safetensors");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("add --merge-lora"), std::string::npos) << r.out;
  r = testing::RunStrata("export " + ck + " --out " + dir.path() + "/m.safetensors --merge-lora");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  r = testing::RunStrata("export " + plain + " --out " + dir.path() + "/p --merge-lora");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("has no LoRA adapters"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir.path() + "/p"));

  r = testing::RunStrata("generate --model " + ck + " --prompt ab --max-new-tokens 4");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  // --stop-token: the continuation ends right after the first token it names.
  const size_t at = r.out.find("ab");
  ASSERT_NE(at, std::string::npos) << r.out;
  const int first = static_cast<unsigned char>(r.out[at + 2]);
  r = testing::RunStrata("generate --model " + ck + " --prompt ab --max-new-tokens 4 --stop-token " +
                         std::to_string(first));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("note: stopped after 1 new tokens at the end-of-sequence token " + std::to_string(first)),
            std::string::npos) << r.out;
}

}  // namespace
}  // namespace strata
