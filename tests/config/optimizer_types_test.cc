// optimizer.type Lion and Adagrad (Note [Optimizer rules]): DeepSpeed 0.19.8's defaults for
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
  EXPECT_NE(Refusal(R"({"type": "Lamb"})").find("\"Lamb\" is DeepSpeed's FusedLamb, not built in this version"),
            std::string::npos);
  EXPECT_NE(Refusal(R"({"type": "OneBitAdam"})").find("compresses the gradients it communicates"), std::string::npos);
  EXPECT_NE(Refusal(R"({"type": "ZeroOneAdam"})").find("Strata runs \"Adam\", \"AdamW\", \"Lion\" and \"Adagrad\""),
            std::string::npos);
  EXPECT_NE(Refusal(R"({"type": "SGD"})").find("optimizer.type: \"SGD\""), std::string::npos);
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
