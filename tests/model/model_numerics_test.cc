// Model numerics: causality, dtypes, grouped-query attention, RoPE, determinism, and a
// short training run on the built-in text whose loss must fall.
#include <gtest/gtest.h>
#include <torch/optim/adam.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "src/data/data.h"
#include "src/model/layers.h"
#include "src/model/model.h"
#include "tests/model/model_test_util.h"

namespace strata::model {
namespace {

// Seed 11: these checks were tuned on that init.
ModelConfig TinyTuned(Arch arch) { return testing::Tiny(arch, /*tie=*/true, /*seed=*/11); }
using testing::Tokens;

double MaxAbs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

TEST(ModelNumericsTest, FutureTokensDoNotChangeEarlierLogits) {
  for (Arch arch : {Arch::kGpt2, Arch::kLlama}) {
    FullModel model{ModelSpec(TinyTuned(arch))};
    torch::NoGradGuard no_grad;
    torch::Tensor tokens = Tokens(2, 16, 64, 1);
    torch::Tensor changed = tokens.clone();
    changed.index_put_({torch::indexing::Slice(), 9}, (tokens.index({torch::indexing::Slice(), 9}) + 1) % 64);
    torch::Tensor a = model.Forward(tokens), b = model.Forward(changed);
    using torch::indexing::Slice;
    EXPECT_LE(MaxAbs(a.index({Slice(), Slice(0, 9)}) - b.index({Slice(), Slice(0, 9)})), 1e-6);
    EXPECT_GT(MaxAbs(a.index({Slice(), Slice(9)}) - b.index({Slice(), Slice(9)})), 1e-4);
  }
}

// bf16 keeps 8 bits of mantissa: the logits (magnitude ~0.1-1 here) agree with fp32 to
// within 3% of their largest value; fp16 (11 bits) to within 0.5%.
TEST(ModelNumericsTest, HalfPrecisionForwardMatchesFp32) {
  for (Arch arch : {Arch::kGpt2, Arch::kLlama}) {
    ModelConfig c = TinyTuned(arch);
    c.init_std = 0.1;  // logits well above rounding noise
    ModelSpec spec(c);
    torch::NoGradGuard no_grad;
    torch::Tensor tokens = Tokens(2, 16, 64, 2);
    torch::Tensor ref = FullModel(spec).Forward(tokens);
    for (auto [dtype, tolerance] : {std::pair{torch::kBFloat16, 0.03}, std::pair{torch::kFloat16, 0.005}}) {
      FullModel half(spec);
      half.to(dtype);
      torch::Tensor logits = half.Forward(tokens);
      EXPECT_EQ(logits.scalar_type(), dtype);
      const double err = MaxAbs(logits.to(torch::kFloat32) - ref) / MaxAbs(ref);
      EXPECT_LT(err, tolerance) << "arch " << static_cast<int>(arch) << " dtype " << dtype;
      EXPECT_NEAR(LanguageModelLoss(logits, tokens).item<double>(), LanguageModelLoss(ref, tokens).item<double>(),
                  0.02);
    }
  }
}

// GQA with 2 kv heads equals full multi-head attention whose k/v heads repeat each kv
// head for its group of query heads.
TEST(ModelNumericsTest, GroupedQueryAttentionEqualsRepeatedKvHeads) {
  ModelConfig gqa = TinyTuned(Arch::kLlama), mha = gqa;
  gqa.n_kv_head = 2;
  mha.n_kv_head = 0;
  auto grouped = MakeBlock(ModelSpec(gqa), 1), full = MakeBlock(ModelSpec(mha), 1);
  torch::NoGradGuard no_grad;
  auto src = grouped->named_parameters();
  for (auto& p : full->named_parameters()) {
    const torch::Tensor& g = src[p.key()];
    if (p.key() == "self_attn.k_proj.weight" || p.key() == "self_attn.v_proj.weight") {
      p.value().copy_(g.view({2, 8, 32}).repeat_interleave(2, 0).reshape({32, 32}));  // head h reads kv head h/2
    } else {
      p.value().copy_(g);
    }
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  torch::Tensor x = torch::randn({2, 16, 32}, gen);
  EXPECT_TRUE(torch::allclose(grouped->Forward(x), full->Forward(x), 1e-5, 1e-6));
}

TEST(RopeTest, HandComputedRotation) {
  // D = 4, theta = 1e4: frequencies 1 and 1e4^(-1/2) = 0.01; rotate-half pairs (0, 2) and (1, 3).
  torch::Tensor x = torch::tensor({1.0f, 2.0f, 3.0f, 4.0f}).view({1, 1, 1, 4}).expand({1, 1, 2, 4});
  auto [cos, sin] = detail::RopeTables(2, 4, 10000.0, x);
  torch::Tensor y = detail::ApplyRope(x, cos, sin);
  const double c1 = std::cos(1.0), s1 = std::sin(1.0), c2 = std::cos(0.01), s2 = std::sin(0.01);
  torch::Tensor expected = torch::tensor({{1.0, 2.0, 3.0, 4.0},  // position 0: unrotated
                                          {1 * c1 - 3 * s1, 2 * c2 - 4 * s2, 3 * c1 + 1 * s1, 4 * c2 + 2 * s2}},
                                         torch::kFloat32);
  EXPECT_TRUE(torch::allclose(y.view({2, 4}), expected, 1e-5, 1e-6)) << y;
}

TEST(RopeTest, ScoresDependOnRelativePositionOnly) {
  const int64_t T = 24, D = 8;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(4);
  torch::Tensor q = torch::randn({1, 1, 1, D}, gen).expand({1, 1, T, D});
  torch::Tensor k = torch::randn({1, 1, 1, D}, gen).expand({1, 1, T, D});
  auto [cos, sin] = detail::RopeTables(T, D, 10000.0, q);
  torch::Tensor scores = torch::matmul(detail::ApplyRope(q, cos, sin), detail::ApplyRope(k, cos, sin).transpose(-1, -2))[0][0];
  for (int64_t d = 0; d < 6; ++d) {
    for (int64_t i = 0; i + d < T; ++i) {
      EXPECT_NEAR(scores[i][i + d].item<float>(), scores[0][d].item<float>(), 1e-4) << i << " " << d;
    }
  }
}

TEST(ModelNumericsTest, ForwardAndBackwardAreBitwiseDeterministic) {
  for (Arch arch : {Arch::kGpt2, Arch::kLlama}) {
    ModelSpec spec(TinyTuned(arch));
    torch::Tensor tokens = Tokens(4, 16, 64, 5);
    std::vector<torch::Tensor> grads[2];
    for (auto& g : grads) {
      FullModel model(spec);
      LanguageModelLoss(model.Forward(tokens), tokens).backward();
      for (const auto& p : model.parameters()) g.push_back(p.grad().clone());
    }
    for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_TRUE(torch::equal(grads[0][i], grads[1][i])) << i;
  }
}

TEST(ModelNumericsTest, UniformLogitsGiveLogVocab) {
  torch::Tensor logits = torch::zeros({2, 3, 256}, torch::kBFloat16);
  torch::Tensor loss = LanguageModelLoss(logits, torch::zeros({2, 3}, torch::kInt64));
  EXPECT_EQ(loss.scalar_type(), torch::kFloat32);
  EXPECT_NEAR(loss.item<double>(), std::log(256.0), 1e-5);
}

// 100 Adam steps on the built-in text: the held-out loss starts at ln(256) = 5.55 and must
// fall well below the text's unigram entropy (3.18 nats), i.e. the model uses context.
// Measured over seeds 1-5: GPT-2 2.31-2.55, LLaMA 2.01-2.25. One layer: two-layer GPT-2s
// sit on the unigram plateau (~3.15) for a seed-dependent 80-150 steps before dropping
// (the d=128, 2-layer model reaches ~1.0 in 400 steps).
TEST(ModelTrainingTest, LossFallsOnBuiltinText) {
  // One intra-op thread: on a loaded 2-core machine OpenMP's spinning threads made these
  // tiny ops 20-40x slower; one thread takes ~25 ms a step.
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  for (Arch arch : {Arch::kGpt2, Arch::kLlama}) {
    ModelConfig c;
    c.arch = arch;
    c.vocab_size = 256;
    c.seq_len = 64;
    c.n_layer = 1;
    c.d_model = 64;
    c.n_head = 4;
    auto data = data::TokenDataset::Open(data::DataConfig{}, c.vocab_size, c.seq_len);
    ASSERT_TRUE(data.ok()) << data.status().ToString();
    FullModel model{ModelSpec(c)};
    torch::optim::Adam adam(model.parameters(), torch::optim::AdamOptions(3e-3));
    auto eval_loss = [&] {
      torch::NoGradGuard no_grad;
      data::Batch b = (*data)->Get(data::Split::kEval, 0, 16);
      return LanguageModelLoss(model.Forward(b.inputs), b.targets).item<double>();
    };
    const double before = eval_loss();
    for (uint64_t step = 0; step < 100; ++step) {
      data::Batch b = (*data)->Get(data::Split::kTrain, step, 16);
      adam.zero_grad();
      LanguageModelLoss(model.Forward(b.inputs), b.targets).backward();
      adam.step();
    }
    const double after = eval_loss();
    std::printf("arch %d: eval loss %.3f -> %.3f\n", static_cast<int>(arch), before, after);
    EXPECT_NEAR(before, std::log(256.0), 0.1);
    EXPECT_LT(after, 2.8);
  }
  at::set_num_threads(threads);
}

// Forward + backward time of the tiny config of the brief (gpt2, 2 layers, d 128, 4 heads,
// seq 128, batch 8); a measurement, not a check: run with --gtest_also_run_disabled_tests.
TEST(ModelTimingTest, DISABLED_TinyGpt2ForwardBackward) {
  ModelConfig c;
  c.vocab_size = 256;
  c.seq_len = 128;
  c.n_layer = 2;
  c.d_model = 128;
  c.n_head = 4;
  ModelSpec spec(c);
  torch::Tensor tokens = Tokens(8, 128, 256, 6);
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    FullModel model(spec);
    model.to(dtype);
    std::vector<double> ms;
    for (int i = 0; i < 12; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      model.zero_grad();
      LanguageModelLoss(model.Forward(tokens), tokens).backward();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin() + 2, ms.end());  // the first two are warm-up
    std::printf("tiny gpt2 fwd+bwd %s: median %.1f ms, min %.1f ms, max %.1f ms (%d threads)\n",
                dtype == torch::kFloat32 ? "fp32" : "bf16", ms[7], ms[2], ms.back(), at::get_num_threads());
  }
}

}  // namespace
}  // namespace strata::model
