// Incremental decoding (KV cache) against the training forward, and the sampler.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "model_test_util.h"
#include "src/model/generate.h"

namespace strata::model {
namespace {

using testing::Tiny;

// The flavours the cache must handle: learned positions, RoPE with GQA, llama3 rope scaling,
// Qwen2 q/k/v biases, Qwen3 q/k norms with a head_dim other than d_model / n_head.
std::vector<std::pair<std::string, ModelConfig>> Flavours() {
  ModelConfig llama3 = Tiny(Arch::kLlama, /*tie=*/false);
  llama3.rope_theta = 500000;
  llama3.rope_scaling = RopeScaling::Llama3(8.0, 1.0, 4.0, 4);
  ModelConfig qwen2 = Tiny(Arch::kLlama);
  qwen2.qkv_bias = true;
  ModelConfig qwen3 = Tiny(Arch::kLlama, /*tie=*/false);
  qwen3.qk_norm = true;
  qwen3.head_dim = 16;
  return {{"gpt2", Tiny(Arch::kGpt2)}, {"llama", Tiny(Arch::kLlama)}, {"llama3", llama3},
          {"qwen2", qwen2},           {"qwen3", qwen3}};
}

// Biases start at 0 and norms at 1: perturb every 1-D parameter so they are exercised too.
void Perturb(FullModel& m) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  for (auto& p : m.parameters())
    if (p.dim() == 1) p.add_(0.1 * torch::randn_like(p));
}

TEST(GenerateTest, CachedForwardEqualsFullForwardAtEveryPosition) {
  for (auto& [name, config] : Flavours()) {
    ASSERT_TRUE(Validate(config).ok()) << name;
    FullModel m{ModelSpec(config)};
    Perturb(m);
    torch::Tensor tokens = torch::randint(config.vocab_size, {1, config.seq_len}, torch::kLong);
    torch::Tensor full;
    {
      torch::NoGradGuard no_grad;
      full = m.Forward(tokens);
    }
    // A 5-token prefill (cache empty), then chunks of 1 and 3 (explicit offset mask).
    Decoder d(m);
    std::vector<torch::Tensor> parts{d.Feed(tokens.narrow(1, 0, 5))};
    for (int64_t t = 5; t < config.seq_len;) {
      const int64_t n = std::min<int64_t>(t % 2 ? 1 : 3, config.seq_len - t);
      parts.push_back(d.Feed(tokens.narrow(1, t, n)));
      t += n;
    }
    EXPECT_EQ(d.position(), config.seq_len);
    torch::Tensor cached = torch::cat(parts, 1);
    EXPECT_LT((cached - full).abs().max().item<double>(), 1e-5) << name;
  }
}

TEST(GenerateTest, GreedyIsDeterministicAndFollowsTheArgmax) {
  ModelConfig config = Tiny(Arch::kLlama);
  FullModel m{ModelSpec(config)};
  Perturb(m);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(0);
  GenerateResult a = Generate(m, config.seq_len, {1, 2, 3}, 8, {}, gen);
  GenerateResult b = Generate(m, config.seq_len, {1, 2, 3}, 8, {}, gen);
  ASSERT_EQ(a.tokens.size(), 8u);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_FALSE(a.reached_max_positions);
  // Each token is the argmax of the full forward over everything before it.
  std::vector<int64_t> seq{1, 2, 3};
  for (int64_t t : a.tokens) {
    torch::NoGradGuard no_grad;
    torch::Tensor logits = m.Forward(torch::tensor(seq, torch::kLong).unsqueeze(0));
    EXPECT_EQ(logits[0][-1].argmax().item<int64_t>(), t);
    seq.push_back(t);
  }
}

TEST(GenerateTest, StopsAtTheModelsPositions) {
  ModelConfig config = Tiny(Arch::kGpt2);  // seq_len 16: the position table's rows
  FullModel m{ModelSpec(config)};
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(0);
  GenerateResult r = Generate(m, config.seq_len, {1, 2, 3, 4}, 100, {}, gen);
  EXPECT_TRUE(r.reached_max_positions);
  EXPECT_EQ(r.tokens.size(), 13u);  // the last one comes from the logits at position 15
}

// A stop token ends the continuation right after it (kept, as transformers keeps its eos).
TEST(GenerateTest, StopsRightAfterAStopToken) {
  ModelConfig config = Tiny(Arch::kLlama);
  FullModel m{ModelSpec(config)};
  Perturb(m);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(0);
  const GenerateResult all = Generate(m, config.seq_len, {1, 2, 3}, 8, {}, gen);
  ASSERT_EQ(all.tokens.size(), 8u);
  const GenerateResult cut = Generate(m, config.seq_len, {1, 2, 3}, 8, {}, gen, {}, {all.tokens[2]});
  const auto first = std::find(all.tokens.begin(), all.tokens.end(), all.tokens[2]);
  EXPECT_EQ(cut.tokens, std::vector<int64_t>(all.tokens.begin(), first + 1));
  EXPECT_TRUE(cut.reached_stop_token);
  EXPECT_FALSE(all.reached_stop_token);
}

TEST(GenerateTest, SamplingWithASeedIsReproducible) {
  ModelConfig config = Tiny(Arch::kGpt2);
  FullModel m{ModelSpec(config)};
  Perturb(m);
  const SamplingOptions o{1.5, 0.9};
  auto run = [&](uint64_t seed) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    return Generate(m, config.seq_len, {5, 6}, 10, o, gen).tokens;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));  // 10 draws at temperature 1.5 over 64 tokens: equal by chance ~never
}

TEST(GenerateTest, TopPKeepsTheNucleusOnly) {
  // Probabilities 0.5, 0.3, 0.15, 0.05 (shuffled): top_p 0.7 keeps the first two (0.5 < 0.7,
  // 0.8 >= 0.7), renormalised to 0.625 / 0.375.
  torch::Tensor probs = torch::tensor({0.15, 0.5, 0.05, 0.3});
  torch::Tensor logits = probs.log();
  torch::Tensor dist = SamplingDistribution(logits, {1.0, 0.7});
  EXPECT_TRUE(torch::allclose(dist, torch::tensor({0.0, 0.625, 0.0, 0.375}), 1e-6, 1e-6)) << dist;
  // top_p 1 is the plain softmax; a tiny top_p keeps the most likely token alone.
  EXPECT_TRUE(torch::allclose(SamplingDistribution(logits, {1.0, 1.0}), probs, 1e-6, 1e-6));
  EXPECT_TRUE(torch::equal(SamplingDistribution(logits, {1.0, 0.01}), torch::tensor({0.0f, 1.0f, 0.0f, 0.0f})));
  // Draws never leave the nucleus.
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(1);
  std::vector<int> counts(4, 0);
  for (int i = 0; i < 2000; ++i) ++counts[NextToken(logits, {1.0, 0.7}, gen)];
  EXPECT_EQ(counts[0] + counts[2], 0);
  EXPECT_GT(counts[1], counts[3]);
  EXPECT_GT(counts[3], 0);
  // Temperature sharpens: at 0.5 the distribution is softmax(2 * logits) = probs^2, normalised.
  torch::Tensor sharp = probs.pow(2) / probs.pow(2).sum();
  EXPECT_TRUE(torch::allclose(SamplingDistribution(logits, {0.5, 1.0}), sharp, 1e-6, 1e-6));
  EXPECT_EQ(NextToken(logits, {}, gen), 1);  // greedy
}

}  // namespace
}  // namespace strata::model
