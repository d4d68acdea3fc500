// The DPO loss of a micro-batch of preference pairs (Note [DPO], dpo.h).
#pragma once

#include <torch/types.h>

#include "src/model/dpo.h"

namespace strata::model {

// Per row of `logits` [B, T, V] the sum over its targets where `mask` (bool [B, T]) is true of
// log p(target), in fp32: [B], differentiable in the logits.
torch::Tensor SequenceLogProbs(const torch::Tensor& logits, const torch::Tensor& targets, const torch::Tensor& mask);

// The mean DPO loss of the pairs of `logps` ([2P]: P chosen rows, then their P rejected ones)
// against the reference's `ref_logps` ([2P], fp32 or fp64); *tally gets the pairs' rewards.
torch::Tensor DpoLoss(const torch::Tensor& logps, const torch::Tensor& ref_logps, const DpoOptions& options,
                      DpoTally* tally);

}  // namespace strata::model
