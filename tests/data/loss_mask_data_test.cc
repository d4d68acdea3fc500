// Loss masks: the file next to the token file (loss_mask.h) through TokenDataset, its
// errors, and MaskedLanguageModelLoss (no gradient at masked positions, the masked mean,
// bitwise LanguageModelLoss with every position selected, 0 and no NaN with none).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "src/data/data.h"
#include "src/model/model.h"
#include "support/temp_dir.h"

namespace strata::data {
namespace {

// 400 uint16 tokens (token i = i), and a mask that trains every third token.
struct Files {
  testing::TempDir dir;
  std::string tokens = dir.path() + "/data.u16";
  std::string mask = tokens + ".mask";
  std::string mask_bytes;
  Files() {
    std::string bytes;
    for (int i = 0; i < 400; ++i) {
      bytes.push_back(static_cast<char>(i & 0xFF));
      bytes.push_back(static_cast<char>(i >> 8));
      mask_bytes.push_back(i % 3 == 0 ? 1 : 0);
    }
    testing::WriteBytes(tokens, bytes);
    testing::WriteBytes(mask, mask_bytes);
  }
  DataConfig Config(const std::string& loss_mask = "auto") const {
    DataConfig c;
    c.path = tokens;
    c.loss_mask = loss_mask;
    c.eval_fraction = 0.25;
    return c;
  }
};

TEST(LossMaskData, BatchesCarryTheMaskOfTheirTargets) {
  Files f;
  auto ds = TokenDataset::Open(f.Config(), 1000, 16);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_TRUE((*ds)->has_loss_mask());
  EXPECT_NE((*ds)->description().find(f.mask), std::string::npos) << (*ds)->description();
  for (Split split : {Split::kTrain, Split::kEval}) {
    int64_t sum = 0;
    for (uint64_t index = 0; index < 3; ++index) {
      Batch b = (*ds)->Get(split, index, 4);
      ASSERT_TRUE(b.loss_mask.defined());
      ASSERT_EQ(b.loss_mask.sizes(), b.targets.sizes());
      for (int64_t r = 0; r < 4; ++r)
        for (int64_t t = 0; t < 16; ++t)  // a target is its own position in the file
          ASSERT_EQ(b.loss_mask[r][t].item<bool>(), b.targets[r][t].item<int64_t>() % 3 == 0) << r << "," << t;
      EXPECT_EQ((*ds)->LossTokens(split, index, 1, 4), b.loss_mask.sum().item<int64_t>());
      sum += b.loss_mask.sum().item<int64_t>();
    }
    EXPECT_EQ((*ds)->LossTokens(split, 0, 3, 4), sum);
  }
}

TEST(LossMaskData, NoneOrNoSiblingMeansEveryTargetCounts) {
  Files f;
  auto none = TokenDataset::Open(f.Config("none"), 1000, 16);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE((*none)->has_loss_mask());
  EXPECT_FALSE((*none)->Get(Split::kTrain, 0, 2).loss_mask.defined());
  EXPECT_EQ((*none)->LossTokens(Split::kTrain, 0, 3, 2), 3 * 2 * 16);
  std::remove(f.mask.c_str());
  auto missing = TokenDataset::Open(f.Config("auto"), 1000, 16);
  ASSERT_TRUE(missing.ok()) << missing.status().ToString();
  EXPECT_FALSE((*missing)->has_loss_mask());
}

TEST(LossMaskData, BadMasksAreErrorsNamingTheFiles) {
  Files f;
  auto expect_error = [&](const DataConfig& c, std::initializer_list<std::string> needles) {
    auto ds = TokenDataset::Open(c, 1000, 16);
    ASSERT_FALSE(ds.ok());
    for (const std::string& n : needles) EXPECT_NE(ds.status().message().find(n), std::string::npos) << ds.status().message();
  };
  expect_error(f.Config(f.dir.path() + "/absent.mask"), {"absent.mask", "does not exist", "loss_mask"});
  testing::WriteBytes(f.mask, f.mask_bytes.substr(1));
  expect_error(f.Config(), {f.mask, f.tokens, "399 bytes", "400 tokens"});
  std::string two = f.mask_bytes;
  two[7] = 2;
  testing::WriteBytes(f.mask, two);
  expect_error(f.Config(), {f.mask, "position 7"});
  std::string eval_untrained = f.mask_bytes;
  for (size_t i = 300; i < 400; ++i) eval_untrained[i] = 0;
  testing::WriteBytes(f.mask, eval_untrained);
  expect_error(f.Config(), {f.mask, "eval split"});
  DataConfig builtin;
  builtin.loss_mask = f.mask;
  expect_error(builtin, {"strata.data.path"});
}

TEST(MaskedLanguageModelLoss, IsTheMeanOverSelectedPositionsWithNoGradientElsewhere) {
  torch::manual_seed(3);
  torch::Tensor logits = torch::randn({2, 5, 7}, torch::kFloat32).requires_grad_(true);
  torch::Tensor targets = torch::randint(0, 7, {2, 5}, torch::kInt64);
  torch::Tensor mask = torch::rand({2, 5}) > 0.5;
  mask[0][0] = true;
  mask[1][4] = false;
  torch::Tensor loss = model::MaskedLanguageModelLoss(logits, targets, mask);
  loss.backward();
  double sum = 0;
  int n = 0;
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 5; ++t) {
      torch::Tensor g = logits.grad()[b][t];
      if (!mask[b][t].item<bool>()) {
        EXPECT_TRUE(torch::equal(g, torch::zeros_like(g))) << "masked position " << b << "," << t;
        continue;
      }
      torch::Tensor logp = torch::log_softmax(logits[b][t].detach().to(torch::kFloat64), 0);
      sum -= logp[targets[b][t].item<int64_t>()].item<double>();
      ++n;
      EXPECT_GT(g.abs().max().item<float>(), 0.0f);
    }
  EXPECT_NEAR(loss.item<double>(), sum / n, 1e-6);  // fp32 log-softmax vs a double one
}

TEST(MaskedLanguageModelLoss, AllSelectedIsBitwiseTheLossAndNoneSelectedIsZero) {
  torch::manual_seed(4);
  torch::Tensor logits = torch::randn({3, 8, 11}, torch::kBFloat16);
  torch::Tensor targets = torch::randint(0, 11, {3, 8}, torch::kInt64);
  EXPECT_TRUE(torch::equal(model::MaskedLanguageModelLoss(logits, targets, torch::ones({3, 8}, torch::kBool)),
                           model::LanguageModelLoss(logits, targets)));
  torch::Tensor x = logits.to(torch::kFloat32).requires_grad_(true);
  torch::Tensor zero = model::MaskedLanguageModelLoss(x, targets, torch::zeros({3, 8}, torch::kBool));
  zero.backward();
  EXPECT_EQ(zero.item<float>(), 0.0f);
  EXPECT_TRUE(torch::equal(x.grad(), torch::zeros_like(x)));
}

}  // namespace
}  // namespace strata::data

namespace strata::data {
namespace {

// strata.data.eval_path: the whole training file trains, the validation file alone is held
// out (its mask beside it, or every target trained where it has none); errors name the key.
TEST(EvalFile, HoldsOutTheValidationFileAndItsMask) {
  testing::TempDir dir;
  auto write_u16 = [&](const std::string& name, int first, int count) {
    std::string bytes;
    for (int i = first; i < first + count; ++i) bytes += {static_cast<char>(i & 0xFF), static_cast<char>(i >> 8)};
    testing::WriteBytes(dir.path() + "/" + name, bytes);
    return dir.path() + "/" + name;
  };
  DataConfig c;
  c.path = write_u16("train.u16", 0, 100);       // tokens 0..99
  c.eval_path = write_u16("valid.u16", 500, 40);  // tokens 500..539
  auto ds = TokenDataset::Open(c, 1000, 16);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->tokens(Split::kTrain), 100);  // no eval_fraction taken from it
  EXPECT_EQ((*ds)->tokens(Split::kEval), 40);
  EXPECT_NE((*ds)->description().find("held out: " + c.eval_path), std::string::npos) << (*ds)->description();
  EXPECT_FALSE((*ds)->has_loss_mask());
  for (uint64_t i = 0; i < 20; ++i) {
    const Batch train = (*ds)->Get(Split::kTrain, i, 4), eval = (*ds)->Get(Split::kEval, i, 4);
    EXPECT_LT(train.targets.max().item<int64_t>(), 100);
    EXPECT_GE(eval.inputs.min().item<int64_t>(), 500);
  }
  // A mask beside the validation file only: the training targets all count.
  std::string mask(40, '\0');
  for (int i = 0; i < 40; i += 2) mask[i] = 1;
  testing::WriteBytes(c.eval_path + ".mask", mask);
  ds = TokenDataset::Open(c, 1000, 16);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_TRUE((*ds)->has_loss_mask());
  EXPECT_EQ((*ds)->LossTokens(Split::kTrain, 0, 1, 4), 4 * 16);
  const Batch eval = (*ds)->Get(Split::kEval, 0, 2);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t t = 0; t < 16; ++t)
      EXPECT_EQ(eval.loss_mask[r][t].item<bool>(), (eval.targets[r][t].item<int64_t>() - 500) % 2 == 0);
  // Too short: named with its key.
  c.eval_path = write_u16("short.u16", 0, 10);
  ds = TokenDataset::Open(c, 1000, 16);
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("'" + c.eval_path + "' (strata.data.eval_path) is too short"), std::string::npos)
      << ds.status().message();
}

}  // namespace
}  // namespace strata::data

namespace strata::data {
namespace {

// strata.data.epochs (Note [Epochs]): every training window once per epoch, in an order of
// its own each epoch; the same sequences on 1 or 2 ranks and in a dataset opened again (a
// resumed run reading on mid-epoch).
TEST(Epochs, EveryWindowOncePerEpochOnAnyRankCountAndAfterAResume) {
  testing::TempDir dir;
  std::string bytes;
  for (int i = 0; i < 1000; ++i) bytes += {static_cast<char>(i & 0xFF), static_cast<char>(i >> 8)};
  DataConfig c;
  c.path = dir.path() + "/tokens.u16";
  testing::WriteBytes(c.path, bytes);
  c.eval_fraction = 0.1;  // 900 training tokens: 59 windows of 16 + 1
  c.epochs = 2;
  auto ds = TokenDataset::Open(c, 1000, 16);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  const int64_t k = (*ds)->epoch_windows();
  ASSERT_EQ(k, (900 - 1) / 16);
  EXPECT_NE((*ds)->description().find("2 epoch(s) of 56 windows"), std::string::npos) << (*ds)->description();
  // One rank, 8 sequences a batch: the first token of each row, in order, over two epochs.
  auto starts = [&](const TokenDataset& d, int world, int64_t rows, int64_t count) {
    std::vector<int64_t> out;
    for (int64_t i = 0; static_cast<int64_t>(out.size()) < count; ++i)
      for (int r = 0; r < world; ++r) {  // rank r of `world` reads index i * world + r
        const Batch b = d.Get(Split::kTrain, static_cast<uint64_t>(i * world + r), rows / world);
        for (int64_t row = 0; row < rows / world; ++row) out.push_back(b.inputs[row][0].item<int64_t>());
      }
    out.resize(static_cast<size_t>(count));
    return out;
  };
  const std::vector<int64_t> one = starts(**ds, 1, 8, 2 * k);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int64_t> seen(one.begin() + epoch * k, one.begin() + (epoch + 1) * k);
    std::sort(seen.begin(), seen.end());
    for (int64_t w = 0; w < k; ++w) ASSERT_EQ(seen[static_cast<size_t>(w)], w * 16) << "epoch " << epoch;
  }
  EXPECT_FALSE(std::equal(one.begin(), one.begin() + k, one.begin() + k));  // shuffled anew
  EXPECT_EQ(starts(**ds, 2, 8, 2 * k), one);
  auto again = TokenDataset::Open(c, 1000, 16);
  ASSERT_TRUE(again.ok());
  const Batch mid = (*again)->Get(Split::kTrain, 5, 8);  // sequences 40..47: mid-epoch
  for (int64_t row = 0; row < 8; ++row) EXPECT_EQ(mid.inputs[row][0].item<int64_t>(), one[40 + row]);
  // Each row is a whole window, its targets the next tokens.
  EXPECT_EQ(mid.targets[0][15].item<int64_t>(), one[40] + 16);
}

}  // namespace
}  // namespace strata::data
