// strata.objective (objective_section.h): "language_model" by default, DPO with TRL's defaults;
// what DPO needs of the data, the batch and the tiles, each refused naming the key.
#include <gtest/gtest.h>

#include <string>

#include "src/config/train_config.h"
#include "src/settle/settle.h"

namespace strata {
namespace {

std::string DpoConfig(const std::string& objective, const std::string& data = R"("packing": "none",
    "long_examples": "truncate")", int micro_batch = 4) {
  return R"({"train_micro_batch_size_per_gpu": )" + std::to_string(micro_batch) + R"(, "strata": {"objective": )" + objective +
         R"(, "data": {"path": "/data/pairs.u16", )" + data + "}}}";
}

std::string ParseError(const std::string& text) {
  auto c = ParseTrainConfig(text, "test");
  return c.ok() ? "" : c.status().message();
}

TEST(Objective, LanguageModelByDefaultAndDpoWithTrlsDefaults) {
  auto lm = ParseTrainConfig("{}", "test");
  ASSERT_TRUE(lm.ok());
  EXPECT_EQ(lm->objective, Objective::kLanguageModel);
  EXPECT_FALSE(lm->data.pairs);
  auto dpo = ParseTrainConfig(DpoConfig(R"("dpo")"), "test");
  ASSERT_TRUE(dpo.ok()) << dpo.status().ToString();
  EXPECT_EQ(dpo->objective, Objective::kDpo);
  EXPECT_TRUE(dpo->data.pairs);
  EXPECT_EQ(dpo->dpo.beta, 0.1);
  EXPECT_EQ(dpo->dpo.loss, model::DpoLossType::kSigmoid);
  auto robust = ParseTrainConfig(
      DpoConfig(R"({"type": "dpo", "beta": 0.5, "loss_type": "robust", "label_smoothing": 0.1})"), "test");
  ASSERT_TRUE(robust.ok()) << robust.status().ToString();
  EXPECT_EQ(robust->dpo.beta, 0.5);
  EXPECT_EQ(robust->dpo.loss, model::DpoLossType::kRobust);
  EXPECT_EQ(robust->dpo.label_smoothing, 0.1);
}

TEST(Objective, WhatDpoCannotTakeIsRefusedByName) {
  EXPECT_NE(ParseError(DpoConfig(R"("ppo")")).find("strata.objective"), std::string::npos);
  EXPECT_NE(ParseError(DpoConfig(R"({"type": "dpo", "label_smoothing": 0.1})"))
                .find("strata.objective.label_smoothing: 0.1 is TRL's label smoothing of the \"robust\" loss"),
            std::string::npos);
  EXPECT_NE(ParseError(DpoConfig(R"({"type": "dpo", "loss_type": "robust", "label_smoothing": 0.5})"))
                .find("strata.objective.label_smoothing"),
            std::string::npos);
  EXPECT_NE(ParseError(DpoConfig(R"("dpo")", R"("packing": "packed", "long_examples": "truncate")"))
                .find("strata.data.packing must be \"none\""),
            std::string::npos);
  EXPECT_NE(ParseError(DpoConfig(R"("dpo")", R"("packing": "none")")).find("strata.data.long_examples"),
            std::string::npos);
  EXPECT_NE(ParseError(R"({"strata": {"objective": "dpo"}})").find("set strata.data.path"), std::string::npos);
  // What the settled batch and tiles must be.
  auto odd = ParseTrainConfig(DpoConfig(R"("dpo")", R"("packing": "none", "long_examples": "truncate")", 3), "test");
  ASSERT_TRUE(odd.ok()) << odd.status().ToString();
  auto settled = SettleRunConfig(*odd, {1, 1, false, {true}});
  ASSERT_FALSE(settled.ok());
  EXPECT_NE(settled.status().message().find("train_micro_batch_size_per_gpu 3 must be even"), std::string::npos)
      << settled.status().message();
  auto tiled = ParseTrainConfig(DpoConfig(R"("dpo")"), "test");
  ASSERT_TRUE(tiled.ok());
  tiled->loss_chunk = 512;
  settled = SettleRunConfig(*tiled, {1, 1, false, {true}});
  ASSERT_FALSE(settled.ok());
  EXPECT_NE(settled.status().message().find("strata.loss_chunk 512"), std::string::npos);
  tiled->loss_chunk = -1;  // "auto": whole logits
  settled = SettleRunConfig(*tiled, {1, 1, false, {true}});
  ASSERT_TRUE(settled.ok()) << settled.status().ToString();
  EXPECT_EQ(settled->config->loss_chunk, 0);
}

}  // namespace
}  // namespace strata
