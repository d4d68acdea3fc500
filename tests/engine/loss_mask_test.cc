// The loss mask in the engine (issue 17, Note [Loss mask] in src/engine/loss_weights.cc):
//  (a) the reported loss is the mean cross-entropy over the trained targets of the whole
//      step (2 micro-batches x 2 ranks), computed here by hand from a plain LibTorch model,
//      and the weights after 3 steps match a LibTorch loop that trains on that mean;
//  (b) masked positions get no gradient: with every window the same, a mask that stops at
//      position k leaves the position embeddings of k.. and the token embeddings of the
//      tokens seen only there bitwise untouched (they move without the mask);
//  (c) a mask of all ones is bitwise the run without a mask;
//  (d) the overlapped optimizer ("speculative", clipping) is bitwise the plain schedule with a mask;
//  (e) a step with no trained target is an error naming the step, never a NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "src/model/model.h"
#include "tests/engine/engine_test_util.h"
#include "support/settled.h"

namespace strata {
namespace {

using testing::RunEngine;
using testing::TempDir;
using testing::TinyConfig;

// tokens.u16 and, when `mask` is not empty, tokens.u16.mask (found by loss_mask "auto").
std::string WriteData(const std::string& dir, const std::vector<uint16_t>& tokens, const std::vector<uint8_t>& mask) {
  const std::string path = dir + "/tokens.u16";
  testing::WriteBytes(path, std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2));
  if (!mask.empty()) testing::WriteBytes(path + ".mask", std::string(mask.begin(), mask.end()));
  return path;
}

// Examples of a prompt (mask 0, 3..40 tokens) then a completion (mask 1, 1..12 tokens): the
// micro-batches hold very different numbers of trained targets.
void RandomExamples(size_t n, std::vector<uint16_t>* tokens, std::vector<uint8_t>* mask) {
  std::mt19937 rng(17);
  while (tokens->size() < n) {
    const int prompt = 3 + static_cast<int>(rng() % 38), completion = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < prompt + completion; ++i) {
      tokens->push_back(static_cast<uint16_t>(rng() % 256));
      mask->push_back(i >= prompt);
    }
  }
  tokens->resize(n);
  mask->resize(n);
}

// Tolerance: fp32 on both sides, sums in a different order (2e-5 after 3 steps, as for the
// unmasked engine-vs-LibTorch test). The mean of the micro-batches' masked means instead
// (measured with that mistake planted in the engine) is off by 1e-3 .. 9e-2 in the loss and
// 1.2e-2 in the weights.
TEST(LossMask, LossIsTheMaskedMeanOverMicroBatchesAndRanks) {
  TempDir dir;
  std::vector<uint16_t> tokens;
  std::vector<uint8_t> mask;
  RandomExamples(4000, &tokens, &mask);
  TrainConfig c = TinyConfig(dir.path());
  c.data.path = WriteData(dir.path(), tokens, mask);
  c.micro_batch = 2;
  c.grad_accum = 2;
  c.no_decay = std::vector<std::string>{};  // the reference decays every parameter
  constexpr int kWorld = 2, kSteps = 3;
  const auto run = RunEngine(c, kWorld, kSteps);
  ASSERT_EQ(run.stats.size(), static_cast<size_t>(kSteps));

  model::ModelSpec spec(c.model);
  model::FullModel ref(spec);
  auto data = data::TokenDataset::Open(c.data, c.model.vocab_size, c.model.seq_len);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  ASSERT_TRUE((*data)->has_loss_mask());
  torch::optim::AdamW opt(ref.parameters(), torch::optim::AdamWOptions(c.lr)
                                                .betas({c.beta1, c.beta2})
                                                .eps(c.eps)
                                                .weight_decay(c.weight_decay));
  for (int64_t s = 0; s < kSteps; ++s) {
    // The step's 4 batches: indices 4s .. 4s+3 (micro-batch g of rank r: (s * 2 + g) * 2 + r).
    torch::Tensor ce_sum = torch::zeros({}, torch::kFloat32);
    int64_t trained = 0;
    double mean_of_means = 0;
    for (int k = 0; k < 4; ++k) {
      data::Batch b = (*data)->Get(data::Split::kTrain, static_cast<uint64_t>(4 * s + k), c.micro_batch);
      torch::Tensor logits = ref.Forward(b.inputs);
      torch::Tensor ce = torch::nn::functional::cross_entropy(
          logits.reshape({-1, c.model.vocab_size}), b.targets.reshape({-1}),
          torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
      torch::Tensor m = b.loss_mask.reshape({-1}).to(torch::kFloat32);
      ce_sum = ce_sum + (ce * m).sum();
      const int64_t n = b.loss_mask.sum().item<int64_t>();
      trained += n;
      mean_of_means += n > 0 ? (ce * m).sum().item<double>() / n / 4 : 0;
    }
    ASSERT_GT(trained, 0);
    torch::Tensor loss = ce_sum / static_cast<double>(trained);
    EXPECT_NEAR(run.stats[s].loss, loss.item<double>(), 1e-5) << "step " << s;
    if (s == 0) {
      EXPECT_GT(std::abs(mean_of_means - loss.item<double>()), 1e-4) << "the test cannot tell the two apart";
    }
    opt.zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(ref.parameters(), c.gradient_clipping);
    opt.step();
  }
  double worst = 0;
  for (size_t b = 0; b < ref.blocks().size(); ++b) {
    auto params = ref.blocks()[b]->named_parameters();
    ASSERT_EQ(params.size(), run.master[b].size());
    for (size_t i = 0; i < params.size(); ++i)
      worst = std::max(worst, (params[i].value().detach() - run.master[b][i].second).abs().max().item<double>());
  }
  EXPECT_LT(worst, 2e-5);
}

// Every window is tokens 0..32 (the train split holds exactly T + 1 = 33 tokens); the mask
// trains the targets of positions 0..19 only. Position p's input reaches the outputs at p and
// later, so with no gradient from the masked positions 20..31, wpe rows 20..31 and the
// (untied) token embeddings of the tokens that appear only at inputs 20..31 get exactly zero
// gradient, and AdamW without weight decay leaves them bitwise as they were.
TEST(LossMask, MaskedPositionsAreNotTrained) {
  constexpr int kT = 32, kTrained = 20;
  std::vector<uint16_t> tokens(2 * (kT + 1));
  for (int i = 0; i < static_cast<int>(tokens.size()); ++i) tokens[i] = static_cast<uint16_t>(i < kTrained ? i : 100 + i);
  std::vector<uint8_t> prompt_tail(tokens.size(), 1);
  for (int i = kTrained + 1; i <= kT; ++i) prompt_tail[i] = 0;  // the targets of positions 20..31
  std::vector<uint8_t> all_ones(tokens.size(), 1);

  auto train = [&](const std::vector<uint8_t>& mask, int64_t steps) {
    TempDir dir;
    TrainConfig c = TinyConfig(dir.path());
    c.data.path = WriteData(dir.path(), tokens, mask);
    c.data.eval_fraction = 0.5;
    c.model.tie_embeddings = false;
    c.weight_decay = 0;
    return RunEngine(c, 1, steps);
  };
  const auto initial = train(all_ones, 0), masked = train(prompt_tail, 3), unmasked = train(all_ones, 3);
  auto param = [](const testing::RunResult& r, const std::string& name) {
    for (const auto& [n, t] : r.master[0])
      if (n == name) return t;
    ADD_FAILURE() << "no parameter " << name;
    return torch::Tensor();
  };
  for (const char* name : {"wpe.weight", "wte.weight"}) {
    SCOPED_TRACE(name);
    const bool wpe = std::string(name) == "wpe.weight";
    torch::Tensor before = param(initial, name), after = param(masked, name), control = param(unmasked, name);
    // Rows seen at trained positions (position p, or token p for p < 20) vs only at masked ones.
    for (int p = 0; p < kT; ++p) {
      const int row = wpe ? p : tokens[p];
      const bool moved = !torch::equal(after[row], before[row]);
      EXPECT_EQ(moved, p < kTrained) << "row " << row << " (position " << p << ")";
      EXPECT_FALSE(torch::equal(control[row], before[row])) << "without the mask row " << row << " moves";
    }
  }
}

TEST(LossMask, AllOnesIsBitwiseNoMask) {
  TempDir dir;
  std::vector<uint16_t> tokens;
  std::vector<uint8_t> mask;
  RandomExamples(3000, &tokens, &mask);
  TrainConfig c = TinyConfig(dir.path());
  c.micro_batch = 2;
  c.grad_accum = 2;
  c.data.path = WriteData(dir.path(), tokens, {});
  const auto plain = RunEngine(c, 2, 3);
  c.data.path = WriteData(dir.path(), tokens, std::vector<uint8_t>(tokens.size(), 1));
  const auto ones = RunEngine(c, 2, 3);
  ASSERT_EQ(ones.stats.size(), 3u);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(plain.stats[s].loss, ones.stats[s].loss) << "step " << s;
  EXPECT_TRUE(testing::BitwiseEqual(plain, ones)) << "max diff " << testing::MaxAbsDiff(plain, ones);
}

// The weights are known before the first backward, so updating blocks during the backward
// (and redoing them when the step clips) stays bitwise the plain schedule.
TEST(LossMask, SpeculativeUpdatesAreBitwiseThePlainSchedule) {
  TempDir dir;
  std::vector<uint16_t> tokens;
  std::vector<uint8_t> mask;
  RandomExamples(3000, &tokens, &mask);
  TrainConfig c = TinyConfig(dir.path());
  c.data.path = WriteData(dir.path(), tokens, mask);
  c.micro_batch = 2;
  c.grad_accum = 2;
  c.compute_dtype = DType::kBF16;
  c.offload_optimizer.device = Tier::kCpu;
  c.optimizer_overlap = OptimizerOverlap::kNone;
  const auto plain = RunEngine(c, 2, 4);
  c.optimizer_overlap = OptimizerOverlap::kSpeculative;
  const auto speculative = RunEngine(c, 2, 4);
  ASSERT_EQ(speculative.stats.size(), 4u);
  int clipped = 0;
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(plain.stats[s].loss, speculative.stats[s].loss) << "step " << s;
    EXPECT_GT(speculative.stats[s].speculated_blocks, 0) << "step " << s;
    clipped += plain.stats[s].grad_norm > c.gradient_clipping;
  }
  EXPECT_GT(clipped, 0) << "no step clipped: the redo path went untested";
  EXPECT_TRUE(testing::BitwiseEqual(plain, speculative));
  EXPECT_EQ(plain.state, speculative.state);
}

// The layer-major schedule (Note [Layer-major schedule]) weighs each micro-batch's masked loss
// as the micro-batch-major one does: bitwise the same run (untied, so every sum keeps its order).
TEST(LossMask, LayerMajorIsBitwiseTheMicroBatchSchedule) {
  TempDir dir;
  std::vector<uint16_t> tokens;
  std::vector<uint8_t> mask;
  RandomExamples(3000, &tokens, &mask);
  TrainConfig c = TinyConfig(dir.path());
  c.model.arch = model::Arch::kLlama;
  c.model.tie_embeddings = false;
  c.model.n_kv_head = 2;
  c.data.path = WriteData(dir.path(), tokens, mask);
  c.micro_batch = 2;
  c.grad_accum = 3;
  c.offload_param.device = Tier::kNvme;
  c.schedule_setting = StepSchedule::kMicroBatch;
  const auto micro = RunEngine(c, 2, 3);
  c.schedule_setting = StepSchedule::kLayerMajor;
  const auto layer = RunEngine(c, 2, 3);
  testing::ExpectSameRun(micro, layer, 3);
  EXPECT_EQ(micro.state, layer.state);
}

// One trained target in 2000 tokens: most steps of one sequence draw none. Such a step is an
// error naming the step, before anything runs; the steps that do draw it train on it alone.
TEST(LossMask, AStepWithNoTrainedTargetIsAnErrorNotANaN) {
  TempDir dir;
  std::vector<uint16_t> tokens(2000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 251);
  std::vector<uint8_t> mask(tokens.size(), 0);
  mask[1000] = 1;  // train split: 0 .. 1899
  mask[1950] = 1;  // eval split
  TrainConfig c = TinyConfig(dir.path());
  c.data.path = WriteData(dir.path(), tokens, mask);
  c.micro_batch = 1;
  auto data = data::TokenDataset::Open(c.data, c.model.vocab_size, c.model.seq_len);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  auto comms = MakeLocalCommunicators(1);
  auto engine = Engine::Create(testing::Settled(c, comms[0]->world_size()), comms[0].get(), nullptr);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  int errors = 0, trained = 0;
  for (int64_t s = 0; s < 40; ++s) {
    auto st = (*engine)->Step(s, **data);
    if ((*data)->LossTokens(data::Split::kTrain, static_cast<uint64_t>(s), 1, 1) == 0) {
      ASSERT_FALSE(st.ok()) << "step " << s;
      EXPECT_NE(st.status().message().find(fmt::format("step {}: the loss mask trains no target", s)), std::string::npos)
          << st.status().message();
      ++errors;
    } else {
      ASSERT_TRUE(st.ok()) << st.status().ToString();
      EXPECT_TRUE(std::isfinite(st->loss) && st->loss > 0) << "step " << s;
      ++trained;
    }
  }
  EXPECT_GT(errors, 0);
  EXPECT_GT(trained, 0);
}

}  // namespace
}  // namespace strata
