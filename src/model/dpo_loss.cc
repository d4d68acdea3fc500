// Note [DPO] (dpo.h): the per-row log-probabilities and the loss over pairs.
#include "src/model/dpo_loss.h"

#include <torch/nn/functional/activation.h>
#include <torch/types.h>

#include "strata/check.h"

namespace strata::model {

torch::Tensor SequenceLogProbs(const torch::Tensor& logits, const torch::Tensor& targets, const torch::Tensor& mask) {
  STRATA_CHECK(logits.dim() == 3 && logits.sizes().slice(0, 2) == targets.sizes() && mask.sizes() == targets.sizes() &&
               mask.scalar_type() == torch::kBool)
      << "logits " << logits.sizes() << " mask " << mask.sizes() << " targets " << targets.sizes();
  const torch::Tensor logp = torch::log_softmax(logits.to(torch::kFloat32), -1);
  const torch::Tensor picked = logp.gather(2, targets.unsqueeze(2)).squeeze(2);  // [B, T]
  return picked.masked_fill(mask.logical_not(), 0.0).sum(1);
}

torch::Tensor DpoLoss(const torch::Tensor& logps, const torch::Tensor& ref_logps, const DpoOptions& o,
                      DpoTally* tally) {
  STRATA_CHECK(logps.dim() == 1 && logps.size(0) % 2 == 0 && ref_logps.sizes() == logps.sizes())
      << "logps " << logps.sizes() << " ref " << ref_logps.sizes();
  const int64_t pairs = logps.size(0) / 2;
  const torch::Tensor ratios = logps - ref_logps.to(logps.scalar_type()).to(logps.device());
  const torch::Tensor chosen = ratios.narrow(0, 0, pairs), rejected = ratios.narrow(0, pairs, pairs);
  const torch::Tensor z = o.beta * (chosen - rejected);
  torch::Tensor per_pair = -torch::nn::functional::logsigmoid(z);
  if (o.loss == DpoLossType::kRobust) {
    const double e = o.label_smoothing;
    per_pair = ((1 - e) * per_pair + e * torch::nn::functional::logsigmoid(-z)) / (1 - 2 * e);
  }
  if (tally) {
    torch::NoGradGuard no_grad;
    const torch::Tensor cr = (o.beta * chosen).to(torch::kFloat64).cpu(), rr = (o.beta * rejected).to(torch::kFloat64).cpu();
    const torch::Tensor lp = logps.detach().to(torch::kFloat64).cpu();
    tally->pairs += pairs;
    tally->chosen_rewards += cr.sum().item<double>();
    tally->rejected_rewards += rr.sum().item<double>();
    tally->margins += (cr - rr).sum().item<double>();
    tally->accuracies += (cr > rr).sum().item<int64_t>();
    tally->chosen_logps += lp.narrow(0, 0, pairs).sum().item<double>();
    tally->rejected_logps += lp.narrow(0, pairs, pairs).sum().item<double>();
  }
  return per_pair.mean();
}

}  // namespace strata::model
