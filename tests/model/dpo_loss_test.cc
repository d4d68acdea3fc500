// DPO's loss (Note [DPO]) against its formula written out in double: the sigmoid loss and TRL's
// label-smoothed "robust" one, their gradients with respect to each row's log-probability, the
// rewards TRL logs, and the per-row log-probability of the trained targets.
#include <gtest/gtest.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <cmath>

#include "src/model/dpo_loss.h"

namespace strata::model {
namespace {

double LogSigmoid(double z) { return -std::log1p(std::exp(-z)); }
double Sigmoid(double z) { return 1 / (1 + std::exp(-z)); }

TEST(DpoLoss, IsTrlsFormulaWithItsGradientAndRewards) {
  torch::manual_seed(3);
  const int64_t P = 5;
  const torch::Tensor logps = (-40 + 5 * torch::randn({2 * P}, torch::kFloat64)).requires_grad_(true);
  const torch::Tensor ref = -40 + 5 * torch::randn({2 * P}, torch::kFloat64);
  for (const auto& [type, e] : {std::pair{DpoLossType::kSigmoid, 0.0}, std::pair{DpoLossType::kRobust, 0.1}}) {
    const DpoOptions o{.beta = 0.3, .loss = type, .label_smoothing = e};
    DpoTally tally;
    torch::Tensor loss = DpoLoss(logps, ref, o, &tally);
    loss.backward();
    double want = 0, margins = 0;
    for (int64_t p = 0; p < P; ++p) {
      const double c = logps[p].item<double>() - ref[p].item<double>();
      const double r = logps[P + p].item<double>() - ref[P + p].item<double>();
      const double z = o.beta * (c - r);
      want += type == DpoLossType::kSigmoid ? -LogSigmoid(z)
                                            : (-(1 - e) * LogSigmoid(z) + e * LogSigmoid(-z)) / (1 - 2 * e);
      margins += o.beta * (c - r);
      // d/dz of the loss, times dz/dlogp = +-beta, over P pairs.
      const double dz = type == DpoLossType::kSigmoid ? -Sigmoid(-z)
                                                      : (-(1 - e) * Sigmoid(-z) - e * Sigmoid(z)) / (1 - 2 * e);
      EXPECT_NEAR(logps.grad()[p].item<double>(), dz * o.beta / P, 1e-12);
      EXPECT_NEAR(logps.grad()[P + p].item<double>(), -dz * o.beta / P, 1e-12);
    }
    EXPECT_NEAR(loss.item<double>(), want / P, 1e-12);
    EXPECT_EQ(tally.pairs, P);
    EXPECT_NEAR(tally.margins, margins, 1e-9);
    EXPECT_NEAR(tally.chosen_rewards - tally.rejected_rewards, margins, 1e-9);
    logps.mutable_grad().reset();
  }
}

TEST(DpoLoss, RowLogProbabilitySumsTheTrainedTargetsInFp32) {
  torch::manual_seed(4);
  const torch::Tensor logits = torch::randn({3, 6, 11}, torch::kBFloat16);
  const torch::Tensor targets = torch::randint(0, 11, {3, 6}, torch::kInt64);
  const torch::Tensor mask = torch::rand({3, 6}) > 0.4;
  const torch::Tensor got = SequenceLogProbs(logits, targets, mask);
  ASSERT_EQ(got.scalar_type(), torch::kFloat32);
  const torch::Tensor logp = torch::log_softmax(logits.to(torch::kFloat32), -1);
  for (int64_t b = 0; b < 3; ++b) {
    double want = 0;
    for (int64_t t = 0; t < 6; ++t)
      if (mask[b][t].item<bool>()) want += logp[b][t][targets[b][t].item<int64_t>()].item<double>();
    EXPECT_NEAR(got[b].item<double>(), want, 1e-5);
  }
}

}  // namespace
}  // namespace strata::model
