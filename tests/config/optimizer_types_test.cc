// optimizer.type Lion, Adagrad, Lamb and Muon (Note [Optimizer rules]): DeepSpeed 0.19.8's defaults for
// what a config leaves out, each noted; what DeepSpeed's CPU classes lack refused by name; the
// types Strata does not run refused with what DeepSpeed would have built; and the state
// formats that are Adam's refused for them.
#include <gtest/gtest.h>

#include <string>

#include "src/config/train_config.h"
#include "src/engine/state_format.h"

namespace strata {
namespace {

TrainConfig ParseWithOptimizer(const std::string& optimizer, const std::string& strata = "{}") {
  auto c = ParseTrainConfig(R"({"optimizer": )" + optimizer + R"(, "strata": )" + strata + "}", "test");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : TrainConfig{};
}

std::string Refusal(const std::string& optimizer) {
  auto c = ParseTrainConfig(R"({"optimizer": )" + optimizer + "}", "test");
  return c.ok() ? "accepted" : c.status().ToString();
}

bool NotedHere(const TrainConfig& c, const std::string& what) {
  for (const std::string& n : c.notes)
    if (n.find(what) != std::string::npos) return true;
  return false;
}

TEST(OptimizerTypes, LionAndAdagradTakeTheDefaultsOfTheClassesDeepSpeedBuilds) {
  const TrainConfig lion = ParseWithOptimizer(R"({"type": "Lion"})");
  EXPECT_EQ(lion.optimizer, OptimizerKind::kLion);
  EXPECT_EQ(lion.lr, 1e-3);
  EXPECT_EQ(lion.beta1, 0.9);
  EXPECT_EQ(lion.beta2, 0.999);
  EXPECT_EQ(lion.weight_decay, 0.0);
  EXPECT_TRUE(NotedHere(lion, "weight_decay: not set, so 0 (DeepSpeed 0.19.8 builds DeepSpeedCPULion or FusedLion)"));
  const TrainConfig adagrad = ParseWithOptimizer(R"({"type": "adagrad", "params": {}})");
  EXPECT_EQ(adagrad.optimizer, OptimizerKind::kAdagrad);
  EXPECT_EQ(adagrad.lr, 1e-2);
  EXPECT_EQ(adagrad.eps, 1e-10);
  EXPECT_EQ(adagrad.weight_decay, 0.0);
  const TrainConfig given = ParseWithOptimizer(R"({"type": "LION", "params": {"lr": 3e-5, "betas": [0.95, 0.98], "weight_decay": 0.1}})");
  EXPECT_EQ(given.lr, 3e-5);
  EXPECT_EQ(given.beta1, 0.95);
  EXPECT_EQ(given.beta2, 0.98);
  EXPECT_EQ(given.weight_decay, 0.1);
  EXPECT_FALSE(NotedHere(given, "weight_decay: not set"));
  EXPECT_EQ(ParseWithOptimizer(R"({"type": "Adagrad", "params": {"lr_decay": 0, "initial_accumulator_value": 0}})").lr, 1e-2);
}

TEST(OptimizerTypes, WhatTheyLackAndWhatStrataDoesNotRunAreRefusedByName) {
  EXPECT_NE(Refusal(R"({"type": "Adagrad", "params": {"lr_decay": 0.1}})")
                .find("optimizer.params.lr_decay: 0.1 is not supported (DeepSpeedCPUAdagrad has no lr_decay)"),
            std::string::npos);
  EXPECT_NE(Refusal(R"({"type": "Adagrad", "params": {"amsgrad": true}})").find("optimizer.params.amsgrad"),
            std::string::npos);
  EXPECT_NE(Refusal(R"({"type": "Lion", "params": {"betas": [1.0, 0.9]}})").find("optimizer.params.betas"),
            std::string::npos);
  EXPECT_NE(Refusal(R"({"type": "AdamW", "params": {"max_grad_norm": 1.0}})")
                .find("optimizer.params.max_grad_norm: not an optimizer parameter (DeepSpeed 0.19.8 refuses it too); "
                      "clip with the top-level gradient_clipping"),
            std::string::npos);
  EXPECT_NE(Refusal(R"({"type": "OneBitAdam"})").find("compresses the gradients it communicates"), std::string::npos);
  EXPECT_NE(Refusal(R"({"type": "ZeroOneAdam"})").find("Strata runs \"Adam\", \"AdamW\", \"Lion\", \"Adagrad\", \"Lamb\" and \"Muon\""),
            std::string::npos);
  EXPECT_NE(Refusal(R"({"type": "SGD"})").find("optimizer.type: \"SGD\""), std::string::npos);
}

// LAMB: FusedLamb's defaults and parameters; what DeepSpeed refuses for it, refused by name;
// the update modes that would start before every tensor's norms are known, refused.
TEST(OptimizerTypes, LambTakesFusedLambsDefaultsAndRefusesWhatItCannotMean) {
  const TrainConfig lamb = ParseWithOptimizer(R"({"type": "Lamb"})");
  EXPECT_EQ(lamb.optimizer, OptimizerKind::kLamb);
  EXPECT_EQ(lamb.lr, 1e-3);
  EXPECT_EQ(lamb.beta1, 0.9);
  EXPECT_EQ(lamb.beta2, 0.999);
  EXPECT_EQ(lamb.eps, 1e-8);
  EXPECT_EQ(lamb.weight_decay, 0.0);
  EXPECT_TRUE(lamb.bias_correction);
  EXPECT_FALSE(lamb.eps_inside_sqrt);
  EXPECT_EQ(lamb.lamb_min_coeff, 0.01);
  EXPECT_EQ(lamb.lamb_max_coeff, 10.0);
  EXPECT_TRUE(NotedHere(lamb, "weight_decay: not set, so 0 (DeepSpeed 0.19.8 builds FusedLamb)"));
  const TrainConfig given = ParseWithOptimizer(
      R"({"type": "LAMB", "params": {"lr": 0.01, "eps_inside_sqrt": true, "bias_correction": false, "max_coeff": 0.3,
          "min_coeff": 0.08, "weight_decay": 0.1}})");
  EXPECT_TRUE(given.eps_inside_sqrt);
  EXPECT_FALSE(given.bias_correction);
  EXPECT_EQ(given.lamb_max_coeff, 0.3);
  EXPECT_EQ(given.lamb_min_coeff, 0.08);
  EXPECT_NE(Refusal(R"({"type": "Lamb", "params": {"amsgrad": true}})").find("optimizer.params.amsgrad"), std::string::npos);
  EXPECT_NE(Refusal(R"({"type": "Lamb", "params": {"min_coeff": 2, "max_coeff": 1}})").find("optimizer.params.min_coeff"),
            std::string::npos);
  auto scaled = ParseTrainConfig(R"({"fp16": {"enabled": true, "loss_scale": 128}, "optimizer": {"type": "Lamb"}})", "test");
  ASSERT_FALSE(scaled.ok());
  EXPECT_NE(scaled.status().ToString().find("fp16.loss_scale: 128 is a static loss scale"), std::string::npos);
  for (const char* overlap : {"speculative", "delayed"}) {
    auto c = ParseTrainConfig(std::string(R"({"optimizer": {"type": "Lamb"}, "zero_optimization": {"stage": 3,
        "offload_param": {"device": "nvme", "nvme_path": "/tmp"}}, "strata": {"optimizer_overlap": ")") + overlap + R"("}})",
                              "test");
    ASSERT_FALSE(c.ok()) << overlap;
    EXPECT_NE(c.status().ToString().find("not with optimizer.type \"Lamb\""), std::string::npos) << c.status().ToString();
  }
}

// Muon: MuonWithAuxAdam's two halves as DeepSpeed 0.19.8's engine builds them (the shared lr
// and weight_decay, muon_lr / adam_lr over the lr, each half's defaults); what Strata does not
// run with it refused by name.
TEST(OptimizerTypes, MuonTakesMuonWithAuxAdamsHalvesAndDefaults) {
  const TrainConfig muon = ParseWithOptimizer(R"({"type": "Muon"})", R"({"model": {"arch": "llama"}})");
  EXPECT_EQ(muon.optimizer, OptimizerKind::kMuon);
  EXPECT_EQ(muon.muon.lr, 0.02);
  EXPECT_EQ(muon.muon.momentum, 0.95);
  EXPECT_EQ(muon.muon.ns, MuonNs::kGram);
  EXPECT_EQ(muon.lr, 3e-4);
  EXPECT_EQ(muon.beta1, 0.9);
  EXPECT_EQ(muon.beta2, 0.95);
  EXPECT_EQ(muon.eps, 1e-10);
  EXPECT_EQ(muon.weight_decay, 0.0);
  EXPECT_TRUE(NotedHere(muon, "weight_decay: not set, so 0 for both halves"));
  const TrainConfig shared = ParseWithOptimizer(R"({"type": "muon", "params": {"lr": 0.01, "weight_decay": 0.1,
      "ns_method": "standard", "momentum": 0.9}})", R"({"model": {"arch": "llama"}})");
  EXPECT_EQ(shared.muon.lr, 0.01);
  EXPECT_EQ(shared.lr, 0.01);
  EXPECT_EQ(shared.weight_decay, 0.1);
  EXPECT_EQ(shared.muon.momentum, 0.9);
  EXPECT_EQ(shared.muon.ns, MuonNs::kStandard);
  const TrainConfig apart = ParseWithOptimizer(R"({"type": "Muon", "params": {"lr": 0.01, "muon_lr": 0.05,
      "adam_lr": 0.002, "ns_method": "torch"}})", R"({"model": {"arch": "llama"}})");
  EXPECT_EQ(apart.muon.lr, 0.05);
  EXPECT_EQ(apart.lr, 0.002);
  EXPECT_EQ(apart.muon.ns, MuonNs::kTorch);
  auto refused = [](const std::string& optimizer, const std::string& strata, const std::string& extra = "") {
    auto c = ParseTrainConfig(R"({"optimizer": )" + optimizer + R"(, "strata": )" + strata + extra + "}", "test");
    return c.ok() ? std::string("accepted") : c.status().ToString();
  };
  const std::string llama = R"({"model": {"arch": "llama"}})";
  EXPECT_NE(refused(R"({"type": "Muon", "params": {"per_head_muon": true}})", llama).find("optimizer.params.per_head_muon"),
            std::string::npos);
  EXPECT_NE(refused(R"({"type": "Muon", "params": {"ns_method": "polar"}})", llama).find("optimizer.params.ns_method"),
            std::string::npos);
  EXPECT_NE(refused(R"({"type": "Muon"})", R"({"model": {"arch": "llama"}, "lora": {"r": 4}})").find("not with strata.lora"),
            std::string::npos);
  EXPECT_NE(refused(R"({"type": "Muon"})", R"({"model": {"arch": "llama"}, "optimizer_overlap": "speculative"})",
                    R"(, "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/tmp"}})")
                .find("not with optimizer.type \"Muon\", whose update needs every whole matrix first"),
            std::string::npos);
  EXPECT_NE(refused(R"({"type": "Muon"})", llama,
                    R"(, "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.001, "cycle_max_lr": 0.01}})")
                .find("cycle Muon's momentum"),
            std::string::npos);
}

TEST(OptimizerTypes, KeepOneFp32StateWhichTheFormatStoresAlone) {
  for (const auto& [type, kept, dropped] : {std::tuple{"Lion", TensorRole::kAdamM, TensorRole::kAdamV},
                                            std::tuple{"Adagrad", TensorRole::kAdamV, TensorRole::kAdamM}}) {
    SCOPED_TRACE(type);
    const TrainConfig c = ParseWithOptimizer(std::string(R"({"type": ")") + type + R"("})");
    const StateFormat f = StateFormat::Of(c, false);
    EXPECT_TRUE(f.Stores(kept));
    EXPECT_FALSE(f.Stores(dropped));
    EXPECT_EQ(f.StoredBytes(kept, 1000), 4000u);
    EXPECT_EQ(f.StoredBytes(dropped, 1000), 0u);
    EXPECT_EQ(f.NumStoredStates(), 1);  // fp32 compute: the master is the working weights
    for (const char* states : {"bf16", "8bit"}) {
      const TrainConfig compact = ParseWithOptimizer(std::string(R"({"type": ")") + type + R"("})",
                                        std::string(R"({"adam_states": ")") + states + R"("})");
      const Status s = StateFormat::Check(compact, false);
      EXPECT_NE(s.ToString().find(std::string("strata.adam_states \"") + states + "\": " + type +
                                  " keeps its state in fp32 only"),
                std::string::npos) << s.ToString();
    }
  }
  const StateFormat adam = StateFormat::Of(ParseWithOptimizer(R"({"type": "AdamW"})"), false);
  EXPECT_EQ(adam.NumStoredStates(), 2);
  EXPECT_STREQ(adam.RowName(TensorRole::kAdamM), "Adam m");
}

}  // namespace
}  // namespace strata
