// Packed examples against transformers (Note [Packed sequences]): for GPT-2 (learned
// positions), LLaMA (RoPE with 3.1 scaling, grouped-query attention) and Qwen2 (biases) written
// by transformers, examples packed into two rows of 32 with their positions restarting give,
// example by example, the loss transformers computes on that example alone (hf_models.py
// examples: 1e-5 relative).
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/hf/hf_loader.h"
#include "src/model/packed_sequences.h"
#include "hf/hf_peers.h"
#include "support/temp_dir.h"
#include "support/settled.h"

namespace strata {
namespace {

class HfPackedExamples : public testing::HfPeersTest {};

TEST_P(HfPackedExamples, EachExampleLossIsTransformersOnItAlone) {
  testing::TempDir dir;
  const std::string hf = dir.path() + "/" + GetParam();
  std::string out;
  ASSERT_EQ(testing::RunHfModels("make " + GetParam() + " " + hf, &out), 0) << out;
  auto cfg = ParseTrainConfig(R"({"strata": {"model": {"from": )" + nlohmann::json(hf).dump() + R"(, "seq_len": 32}}})",
                              "packed");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  const model::ModelSpec spec(cfg->model);
  auto weights = ckpt::HfWeights::Open(hf, cfg->model);
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  model::FullModel full(spec);
  ASSERT_TRUE(ckpt::LoadIntoModel(**weights, full).ok());

  // Two rows of 32: [7 | 12 | 9 | padding 4] and [15 | 10 | 5 | padding 2].
  const std::vector<std::vector<int64_t>> lengths = {{7, 12, 9, 4}, {15, 10, 5, 2}};
  std::mt19937 rng(31);
  torch::Tensor tokens = torch::empty({2, 32}, torch::kInt64), positions = torch::empty({2, 32}, torch::kInt64);
  for (int64_t r = 0; r < 2; ++r) {
    int64_t t = 0;
    for (int64_t length : lengths[r])
      for (int64_t j = 0; j < length; ++j, ++t) {
        tokens[r][t] = static_cast<int64_t>(rng() % 256);
        positions[r][t] = j;
      }
  }
  torch::NoGradGuard no_grad;
  torch::Tensor logits;
  {
    const auto packed = model::PackedLayout::Of(positions);
    logits = full.Forward(tokens, model::BlockContext{.packing = packed.get()});
  }
  // Unpacked, the second example of a row sees the first: the check below can tell.
  const torch::Tensor crossed = full.Forward(tokens);
  EXPECT_GT((crossed[0].narrow(0, 7, 12) - logits[0].narrow(0, 7, 12)).abs().max().item<double>(), 1e-2);
  nlohmann::json given = {{"examples", nlohmann::json::array()}, {"losses", nlohmann::json::array()}};
  for (int64_t r = 0; r < 2; ++r) {
    int64_t start = 0;
    for (size_t e = 0; e + 1 < lengths[r].size(); start += lengths[r][e], ++e) {  // the last run is padding
      const int64_t n = lengths[r][e];
      const torch::Tensor ids = tokens[r].narrow(0, start, n);
      const double loss = torch::nn::functional::cross_entropy(logits[r].narrow(0, start, n - 1),
                                                               ids.narrow(0, 1, n - 1))
                              .item<double>();
      given["examples"].push_back(std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + n));
      given["losses"].push_back(loss);
    }
  }
  const std::string file = dir.path() + "/examples.json";
  std::ofstream(file) << given.dump();
  const int rc = testing::RunHfModels("examples " + hf + " " + file, &out);
  std::printf("[ %s ] %s", GetParam().c_str(), out.c_str());
  EXPECT_EQ(rc, 0) << out;
}

INSTANTIATE_TEST_SUITE_P(Families, HfPackedExamples, ::testing::Values("gpt2", "llama", "qwen2", "gemma2"));

}  // namespace
}  // namespace strata
