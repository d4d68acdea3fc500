// DeepSpeed keys Strata does not implement (src/config/unsupported_keys.h): those that would
// change what is trained are refused, naming the key and what DeepSpeed would have done,
// unless strata.allow_unsupported; those off as written, and those that change nothing
// trained, are notes.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "src/config/train_config.h"

namespace strata {
namespace {

bool Holds(const std::vector<std::string>& lines, const std::string& part) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(part) != std::string::npos; });
}

void ExpectRefused(const std::string& text, const std::string& key, const std::string& deepspeed_would) {
  auto c = ParseTrainConfig(text, "u.json");
  ASSERT_FALSE(c.ok()) << key;
  const std::string m = c.status().message();
  EXPECT_NE(m.find("u.json: " + key + ": DeepSpeed would " + deepspeed_would), std::string::npos) << m;
  EXPECT_NE(m.find("--set strata.allow_unsupported=true"), std::string::npos) << m;
}

TEST(UnsupportedKeys, ZenFlowIsRefusedNamingTheKey) {
  ExpectRefused(R"({"zero_optimization": {"stage": 3, "zenflow": {"topk_ratio": 0.05, "update_interval": 4}}})",
                "zero_optimization.zenflow", "update the largest gradient columns every step");
}

TEST(UnsupportedKeys, EnabledCompressionTrainingIsRefusedNamingTheKey) {
  ExpectRefused(R"({"compression_training": {"weight_quantization": {"shared_parameters": {"enabled": true},
                                                                      "different_groups": {}}}})",
                "compression_training", "quantize, prune or drop layers");
}

TEST(UnsupportedKeys, WithAllowUnsupportedTheyParseAndTheNotesRemain) {
  auto c = ParseTrainConfig(R"({"zero_optimization": {"stage": 3, "zenflow": {"topk_ratio": 0.05}},
                                "compression_training": {"layer_reduction": {"enabled": true}},
                                "strata": {"allow_unsupported": true}})", "u.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->allow_unsupported);
  EXPECT_TRUE(c->warnings.empty()) << c->warnings[0];
  EXPECT_TRUE(Holds(c->notes, "zero_optimization.zenflow: not implemented; trained without it")) << c->notes.size();
  EXPECT_TRUE(Holds(c->notes, "compression_training: not implemented; trained without it"));
  // The same through --set, as train and config check take it.
  auto text = ApplyOverrides(R"({"zero_optimization": {"zenflow": {}}, "prescale_gradients": true})",
                             {"strata.allow_unsupported=true"});
  ASSERT_TRUE(text.ok());
  auto set = ParseTrainConfig(*text, "u.json");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_TRUE(Holds(set->notes, "prescale_gradients: not implemented"));
  EXPECT_TRUE(Holds(set->notes, "zero_optimization.zenflow: not implemented"));  // empty: ZenFlow's defaults
}

TEST(UnsupportedKeys, EveryRefusedKeyIsNamedInOneError) {
  auto c = ParseTrainConfig(R"({"gradient_predivide_factor": 2.0, "optimizer": {"type": "AdamW",
                                "params": {"amsgrad": true}}, "fp16": {"enabled": true,
                                "fp16_master_weights_and_grads": true}})", "u.json");
  ASSERT_FALSE(c.ok());
  for (const char* key : {"gradient_predivide_factor: ", "optimizer.params.amsgrad: ", "fp16.fp16_master_weights_and_grads: "})
    EXPECT_NE(c.status().message().find(key), std::string::npos) << key << " in " << c.status().message();
  EXPECT_NE(c.status().message().find("Remove these keys"), std::string::npos) << c.status().message();
}

// Off as written, a key changes nothing: a note, not an error, not an unknown-key warning.
TEST(UnsupportedKeys, KeysOffAsWrittenAreNotes) {
  auto c = ParseTrainConfig(R"({"compression_training": {"weight_quantization": {"shared_parameters": {"enabled": false}}},
                                "progressive_layer_drop": {"enabled": false, "theta": 0.5},
                                "data_efficiency": {"enabled": false, "data_sampling": {"enabled": true}},
                                "sparse_gradients": false, "prescale_gradients": false, "gradient_predivide_factor": 1.0,
                                "tensor_parallel": {"autotp_size": 1}, "zero_optimization": {"zero_quantized_weights": false},
                                "optimizer": {"type": "AdamW", "params": {"amsgrad": false, "fp32_optimizer_states": true}}})",
                            "u.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->warnings.empty()) << c->warnings[0];
  for (const char* key : {"compression_training", "progressive_layer_drop", "data_efficiency", "sparse_gradients",
                          "prescale_gradients", "gradient_predivide_factor",
                          "zero_optimization.zero_quantized_weights", "optimizer.params.amsgrad",
                          "optimizer.params.fp32_optimizer_states"})
    EXPECT_TRUE(Holds(c->notes, std::string(key) + ": off as written")) << key;
}

// Monitors, profilers and logs change nothing trained: notes, whatever they hold; but for the
// monitors Strata writes (tensorboard, csv_monitor, wandb: src/monitor), which are read.
TEST(UnsupportedKeys, KeysThatChangeNothingTrainedAreNotes) {
  auto c = ParseTrainConfig(R"({"steps_per_print": 5, "wall_clock_breakdown": true,
                                "tensorboard": {"enabled": true, "output_path": "/tmp/tb"}, "wandb": {"enabled": true, "group": null, "team": "t"},
                                "comet": {"enabled": true}, "flops_profiler": {"enabled": true}, "comms_logger": {"enabled": true},
                                "dump_state": true})", "u.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->steps_per_print, 5);  // read: Strata's log interval
  EXPECT_TRUE(c->warnings.empty()) << c->warnings[0];
  for (const char* key : {"comet", "flops_profiler", "comms_logger", "dump_state"})
    EXPECT_TRUE(Holds(c->notes, std::string(key) + ": accepted, not used (it changes nothing trained)")) << key;
  EXPECT_FALSE(Holds(c->notes, "tensorboard"));
  EXPECT_TRUE(c->tensorboard.enabled);
  EXPECT_EQ(c->tensorboard.output_path, "/tmp/tb");
  EXPECT_EQ(c->tensorboard.job_name, "DeepSpeedJobName");  // DeepSpeed's default
  EXPECT_FALSE(Holds(c->notes, "steps_per_print"));
  EXPECT_FALSE(Holds(c->notes, "wandb"));
  EXPECT_TRUE(c->wandb.enabled);
  EXPECT_EQ(c->wandb.project, "deepspeed");  // DeepSpeed's defaults
  EXPECT_EQ(c->wandb.group, "");            // (null: None)
  EXPECT_EQ(c->wandb.team, "t");
  auto bad = ParseTrainConfig(R"({"wandb": {"enabled": true, "project": 3}})", "u.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("wandb.project: expected a string"), std::string::npos) << bad.status().message();
}

TEST(UnsupportedKeys, AllowUnsupportedMustBeABoolean) {
  auto c = ParseTrainConfig(R"({"strata": {"allow_unsupported": "yes"}})", "u.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("strata.allow_unsupported: expected true or false"), std::string::npos)
      << c.status().message();
}

}  // namespace
}  // namespace strata
