// Note [DPO]
// Direct preference optimisation (Rafailov et al. 2023) as TRL's DPOTrainer computes it: a
// micro-batch of 2P rows holds P preference pairs, the P chosen completions first and their P
// rejected ones after (TRL's [chosen, rejected] layout), each row a prompt and one completion
// whose completion tokens alone are trained (the loss mask). Per row the log-probability of its
// completion, the sum over its trained targets of log p(target), in fp32; per pair
//   delta = (logp_chosen - ref_chosen) - (logp_rejected - ref_rejected)
//   sigmoid: -logsigmoid(beta * delta)
//   robust:  (-(1 - e) logsigmoid(beta * delta) + e logsigmoid(-beta * delta)) / (1 - 2e), e the
//            label smoothing (the chance a preference label is flipped), in [0, 0.5)
// and the micro-batch's loss is the mean over its pairs (a step's, over every pair of the step:
// each micro-batch holds as many). The reference log-probabilities are the initial model's,
// computed in one forward pass over the data before the first step (TRL's
// precompute_ref_log_probs), so the weights stream once per step, not twice; with LoRA the
// initial model is the frozen base (the adapters start at zero). The rewards TRL logs are
// beta * (logp - ref) of the chosen and the rejected completions, their margin, and the share
// of pairs whose chosen reward is the larger. With the layers split (Note [Tensor parallel]) a
// tensor group's members compute the same rows' log-probabilities; with the rows split (Note
// [Ulysses]) each member sums its positions and the group adds the parts (RowTotalsOverGroup);
// a group's pairs are tallied once. Torch-free: the options and the step's tallies.
#pragma once

#include <cstdint>

namespace strata::model {

enum class DpoLossType { kSigmoid, kRobust };

struct DpoOptions {
  double beta = 0.1;  // TRL's DPOConfig default
  DpoLossType loss = DpoLossType::kSigmoid;
  double label_smoothing = 0;  // robust only
};

// A pass's pairs, summed: the means TRL logs are these over `pairs`.
struct DpoTally {
  int64_t pairs = 0;
  double chosen_rewards = 0, rejected_rewards = 0, margins = 0, accuracies = 0;
  double chosen_logps = 0, rejected_logps = 0;
  DpoTally& operator+=(const DpoTally& o) {
    pairs += o.pairs;
    chosen_rewards += o.chosen_rewards;
    rejected_rewards += o.rejected_rewards;
    margins += o.margins;
    accuracies += o.accuracies;
    chosen_logps += o.chosen_logps;
    rejected_logps += o.rejected_logps;
    return *this;
  }
};

}  // namespace strata::model
