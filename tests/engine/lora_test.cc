// LoRA (strata.lora, issue 17): only the adapters train, the frozen base keeps its bytes
// wherever it lives, and the adapters' updates are the same on every placement, rank count
// and device path.
#include <gtest/gtest.h>

#include <tuple>

#include "src/engine/shard_plan.h"
#include "src/model/model.h"
#include "tests/engine/engine_test_util.h"

namespace strata {
namespace {

using testing::RunEngine;
using testing::RunResult;
using testing::TempDir;

// A tiny LLaMA (GQA) with adapters of rank 4 on every projection.
TrainConfig LoraConfig(const std::string& dir, bool lora = true) {
  TrainConfig c = testing::TinyConfig(dir);
  c.model.arch = model::Arch::kLlama;
  c.model.n_kv_head = 2;
  c.optimizer_overlap = OptimizerOverlap::kForward;
  c.lr = 0.01;
  if (lora) {
    c.model.lora.r = 4;
    c.model.lora.alpha = 8;
    c.model.lora.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  }
  return c;
}

bool IsAdapter(const std::string& name) { return name.ends_with(".lora_A") || name.ends_with(".lora_B"); }

// The bytes of every working-weight tensor of rank 0 ("block<b>.working" and, with the base on
// NVMe, "block<b>.adapter"), by name.
std::map<std::string, std::vector<std::byte>> Working(const RunResult& r, TensorRole role) {
  std::map<std::string, std::vector<std::byte>> out;
  for (const auto& [name, bytes] : r.state)
    if (auto key = TensorKey::Parse(name); key && key->role == role) out[name] = bytes;
  return out;
}

TEST(Lora, TrainsOnlyTheAdaptersWhileTheBaseKeepsItsBytes) {
  TempDir dir;
  for (Tier d : {Tier::kCpu, Tier::kNvme}) {
    SCOPED_TRACE(::testing::Message() << "offload " << OffloadDeviceName(d));
    TrainConfig c = LoraConfig(dir.path());
    c.compute_dtype = DType::kBF16;
    c.offload_param.device = d;
    c.offload_optimizer.device = d;
    const RunResult before = RunEngine(c, 1, 0), after = RunEngine(c, 1, 20);
    ASSERT_EQ(after.stats.size(), 20u);
    EXPECT_LT(after.stats.back().loss, after.stats.front().loss - 0.05);
    // The base: no master weights (MasterParameters leaves it zero), and its working weights
    // bitwise as created. The adapters: trained (B starts at zero).
    for (size_t b = 0; b < after.master.size(); ++b)
      for (size_t i = 0; i < after.master[b].size(); ++i) {
        const auto& [name, value] = after.master[b][i];
        if (IsAdapter(name)) {
          if (name.ends_with("lora_B")) {
            EXPECT_TRUE(torch::equal(before.master[b][i].second, torch::zeros_like(value))) << name;
            EXPECT_GT(value.abs().max().item<float>(), 0) << name;
          }
        } else {
          EXPECT_EQ(value.abs().max().item<float>(), 0) << name << " has master weights";
        }
      }
    const model::ModelSpec spec(c.model);
    const auto base_before = Working(before, TensorRole::kWorking), base_after = Working(after, TensorRole::kWorking);
    ASSERT_EQ(base_before.size(), 4u);
    for (const auto& [name, bytes] : base_before) {  // the bf16 base: each block's group up to its adapters
      const int b = TensorKey::Parse(name)->block;
      const size_t frozen = 2 * (spec.block_parameters(b) - spec.trainable_parameters(b));
      ASSERT_GE(bytes.size(), frozen);
      EXPECT_TRUE(std::equal(bytes.begin(), bytes.begin() + frozen, base_after.at(name).begin())) << name << " changed";
    }
    // With the base on NVMe the layers' trainable ends are host tensors of their own.
    EXPECT_EQ(Working(after, TensorRole::kAdapter).size(), d == Tier::kNvme ? 2u : 0u);
    // Optimizer state for the adapters only: 12 B per trainable parameter (fp32 master, m, v).
    int64_t trainable = 0;
    for (int b = 0; b < spec.num_blocks(); ++b) {
      const int64_t t = spec.trainable_parameters(b);
      trainable += t == 0 ? 0 : t + (MakeShardLayout(spec.block_parameters(b), 1, 0).padded - spec.block_parameters(b));
    }
    EXPECT_EQ(after.ledger.Of(StateKind::kMaster) + after.ledger.Of(StateKind::kAdamM) +
                  after.ledger.Of(StateKind::kAdamV), static_cast<uint64_t>(trainable) * 12);
  }
}

TEST(Lora, StartsAsTheBaseModel) {
  // B = 0: the adapted model's first loss is the base's, bitwise (the base draws the same
  // weights with adapters or without).
  TempDir dir;
  const RunResult base = RunEngine(LoraConfig(dir.path(), false), 1, 1);
  const RunResult lora = RunEngine(LoraConfig(dir.path()), 1, 1);
  ASSERT_EQ(base.stats.size(), 1u);
  ASSERT_EQ(lora.stats.size(), 1u);
  EXPECT_EQ(base.stats[0].loss, lora.stats[0].loss);
}

TEST(Lora, EveryPlacementAndTheDevicePathTrainTheSameAdapters) {
  TempDir dir;
  TrainConfig c = LoraConfig(dir.path());
  c.compute_dtype = DType::kBF16;
  const RunResult reference = RunEngine(c, 2, 4);
  const FakeDeviceOptions delays{.seed = 3, .max_delay_us = 200, .copy_gbps = 0, .poison = true};
  for (Tier d : {Tier::kCpu, Tier::kNvme}) {
    for (bool fake : {false, true}) {
      SCOPED_TRACE(::testing::Message() << OffloadDeviceName(d) << (fake ? " on the fake device" : ""));
      TrainConfig p = c;
      p.offload_param.device = d;
      p.offload_optimizer.device = d;
      const RunResult run = RunEngine(p, 2, 4, fake ? &delays : nullptr);
      ASSERT_EQ(run.stats.size(), 4u);
      for (int s = 0; s < 4; ++s) EXPECT_EQ(run.stats[s].loss, reference.stats[s].loss) << "step " << s;
      EXPECT_TRUE(testing::BitwiseEqual(run, reference)) << "max diff " << testing::MaxAbsDiff(run, reference);
    }
  }
  // The resident path (offload none on the fake device: working weights on the device).
  const RunResult resident = RunEngine(c, 2, 4, &delays);
  EXPECT_TRUE(testing::BitwiseEqual(resident, reference));
}

TEST(Lora, OneRankAndTwoRanksAgree) {
  // With 2 ranks at stage 3 the adapters (the end of each layer's group) are rank 1's: rank 0
  // holds no optimizer state at all.
  TempDir dir;
  TrainConfig one = LoraConfig(dir.path());
  one.grad_accum = 2;
  one.offload_param.device = Tier::kNvme;
  one.offload_optimizer.device = Tier::kNvme;
  TrainConfig two = one;
  two.grad_accum = 1;
  const RunResult a = RunEngine(one, 1, 4), b = RunEngine(two, 2, 4);
  EXPECT_LT(testing::MaxAbsDiff(a, b), 2e-5);
  for (int s = 0; s < 4; ++s) EXPECT_NEAR(a.stats[s].loss, b.stats[s].loss, 1e-5) << "step " << s;
}

// Dropout on the adapters' inputs (Note [LoRA dropout]): a block recomputed in the backward
// draws the forward's masks (recompute and kept activations train bitwise alike), 1 rank with
// 2 micro-batches and 2 ranks see the same masks, and the held-out loss is not dropped out.
TEST(Lora, DropoutMasksAreTheForwardsInTheRecomputation) {
  TempDir dir;
  TrainConfig c = LoraConfig(dir.path());
  c.model.lora.dropout = 0.2;
  TrainConfig kept = c;
  kept.recompute = Recompute::kNever;  // kept activations
  TrainConfig none = c;
  none.model.lora.dropout = 0;
  const RunResult a = RunEngine(c, 1, 4), b = RunEngine(kept, 1, 4), z = RunEngine(none, 1, 4);
  ASSERT_EQ(a.stats.size(), 4u);
  EXPECT_TRUE(testing::BitwiseEqual(a, b)) << "max diff " << testing::MaxAbsDiff(a, b);
  EXPECT_EQ(a.stats[0].loss, z.stats[0].loss);  // B = 0: dropout of the adapters' input changes nothing yet
  EXPECT_GT(testing::MaxAbsDiff(a, z), 1e-4);   // then it does
  TrainConfig one = c, two = c;
  one.grad_accum = 2;
  const RunResult r1 = RunEngine(one, 1, 3), r2 = RunEngine(two, 2, 3);
  EXPECT_LT(testing::MaxAbsDiff(r1, r2), 2e-5);
}

TEST(Lora, ConfigErrorsNameTheKey) {
  auto parse = [](const std::string& lora) {
    return ParseTrainConfig(R"({"strata": {"model": {"arch": ")" + std::string(lora.find("gpt2") != std::string::npos ? "gpt2" : "llama") +
                                R"(", "vocab_size": 256, "seq_len": 32, "n_layer": 2, "d_model": 64, "n_head": 4}, "lora": )" +
                                lora + "}}", "test");
  };
  EXPECT_TRUE(parse(R"({"r": 8})").ok());
  EXPECT_EQ(parse(R"({"r": 8})")->model.lora.target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_TRUE(parse(R"({"r": 8, "target_modules": "o_proj"})").ok());
  for (const auto& [bad, says] : std::vector<std::pair<std::string, std::string>>{
           {R"({"r": 8, "target_modules": ["q_proj", "qkv"]})", "\"qkv\" is not one of"},
           {R"({"r": 8, "dropout": 1.0})", "strata.lora.dropout"},
           {R"({"r": -1})", "strata.lora.r"},
           {R"({"r": 8, "target_modules": 3})", "strata.lora.target_modules"},
           {R"({"r": 8, "gpt2": 1})", "LLaMA family"},
           // Without a rank these trained the whole model, without a word.
           {R"({"target_parameters": ["experts.down_proj"]})",
            "strata.lora.target_parameters is set but strata.lora.r is not: without a rank no adapter is built"},
           {R"({"target_modules": ["q_proj"], "alpha": 32})", "strata.lora.target_modules is set but strata.lora.r"},
           {R"({"dropout": 0.1})", "strata.lora.dropout is set but strata.lora.r is not"}}) {
    auto c = parse(bad);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(c.status().message().find(says), std::string::npos) << c.status().message();
  }
}

// A mixture of experts' experts are targeted as PEFT targets transformers' fused expert
// tensors (target_parameters), Phi-3's fused projections as PEFT names them; the counts
// follow the layout of StackedAdapter (layers.h).
TEST(Lora, FusedTargetsAsPeftNamesThem) {
  auto parse = [](const std::string& model, const std::string& lora) {
    return ParseTrainConfig(R"({"strata": {"model": {"arch": "llama", "vocab_size": 256, "seq_len": 32, "n_layer": 2,
        "d_model": 64, "n_head": 4)" + model + R"(}, "lora": )" + lora + "}}", "test");
  };
  const std::string moe =
      R"(, "hf_model_type": "qwen3_moe", "qk_norm": true, "moe": {"num_experts": 4, "top_k": 2, "expert_ffn": 32})";
  auto only = parse(moe, R"({"r": 2, "target_parameters": ["experts.gate_up_proj", "mlp.experts.down_proj"]})");
  ASSERT_TRUE(only.ok()) << only.status().ToString();
  EXPECT_TRUE(only->model.lora.target_modules.empty());  // PEFT: no default modules beside parameters
  EXPECT_TRUE(only->model.lora.TargetsExperts("gate_up_proj") && only->model.lora.TargetsExperts("down_proj"));
  const model::ModelSpec spec(only->model);
  EXPECT_EQ(spec.trainable_parameters(1), 4 * 2 * (64 + 2 * 32) + 4 * 2 * (32 + 64));
  auto both = parse(moe, R"({"r": 2, "target_modules": ["q_proj"], "target_parameters": "down_proj"})");
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  EXPECT_EQ(model::ModelSpec(both->model).trainable_parameters(1), 2 * (64 + 64) + 4 * 2 * (32 + 64));
  auto phi3 = parse(R"(, "hf_model_type": "phi3")", R"({"r": 2, "target_modules": ["qkv_proj", "gate_up_proj"]})");
  ASSERT_TRUE(phi3.ok()) << phi3.status().ToString();
  EXPECT_EQ(model::ModelSpec(phi3->model).trainable_parameters(1),
            2 * (64 + 3 * 64) + 2 * (64 + 2 * model::FfnHidden(phi3->model)));
  auto round = ParseModelConfigJson(ModelConfigJson(both->model), "manifest");  // a checkpoint's model section
  ASSERT_TRUE(round.ok()) << round.status().ToString();
  EXPECT_EQ(round->lora, both->model.lora);
  for (const auto& [model, lora, says] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {moe, R"({"r": 2, "target_parameters": ["experts.gate_proj"]})", "\"experts.gate_proj\" is not"},
           {"", R"({"r": 2, "target_parameters": ["experts.down_proj"]})", "strata.lora.target_parameters"},
           {moe, R"({"r": 2, "dropout": 0.1, "target_parameters": ["down_proj"]})", "strata.lora.dropout"},
           {moe, R"({"r": 2, "target_modules": ["up_proj"]})", "strata.lora.target_parameters"},
           {moe, R"({"r": 2, "target_parameters": 3})", "strata.lora.target_parameters"},
           {"", R"({"r": 2, "target_modules": ["qkv_proj"]})", "is Phi-3's fused projection"},
           {R"(, "hf_model_type": "qwen3_moe", "qk_norm": true, "moe": {"num_experts": 4, "top_k": 2, "expert_ffn": 32,
                 "dense_layers": [true, true]})",
            R"({"r": 2, "target_parameters": ["down_proj"]})", "makes every layer dense"},
           {R"(, "hf_model_type": "phi3")", R"({"r": 2, "target_modules": ["q_proj"]})", "Phi-3 fuses q/k/v"}}) {
    auto c = parse(model, lora);
    ASSERT_FALSE(c.ok()) << lora;
    EXPECT_NE(c.status().message().find(says), std::string::npos) << c.status().message();
  }
}

}  // namespace
}  // namespace strata
