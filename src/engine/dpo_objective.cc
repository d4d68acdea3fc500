// DpoObjective (dpo_objective.h).
#include "src/engine/dpo_objective.h"

#include <torch/types.h>

#include "src/model/dpo_loss.h"
#include "src/model/ulysses.h"
#include "strata/check.h"

namespace strata {

torch::Tensor DpoObjective::Loss(model::Block& head, const torch::Tensor& x, const torch::Tensor& targets,
                                 const torch::Tensor& mask, const torch::Tensor& rows, model::DpoTally* tally,
                                 Communicator* sequence_group) const {
  STRATA_CHECK(rows.defined() && rows.dim() == 1 && rows.size(0) == x.size(0)) << "DPO needs each row's number";
  std::vector<double> ref(static_cast<size_t>(rows.size(0)));
  const int64_t* r = rows.data_ptr<int64_t>();
  for (size_t i = 0; i < ref.size(); ++i) {
    STRATA_CHECK(r[i] >= 0 && static_cast<size_t>(r[i]) < reference_.size())
        << "row " << r[i] << " has no reference log-probability (" << reference_.size() << " rows)";
    ref[i] = reference_[static_cast<size_t>(r[i])];
  }
  torch::Tensor logps = HeadRowLogProbs(head, x, targets, mask);
  if (sequence_group) logps = model::RowTotalsOverGroup(logps, *sequence_group);
  return model::DpoLoss(logps, torch::tensor(ref, torch::kFloat64), options_, tally);
}

torch::Tensor HeadRowLogProbs(model::Block& head, const torch::Tensor& x, const torch::Tensor& targets,
                          const torch::Tensor& mask) {
  return model::SequenceLogProbs(head.Forward(x), targets, mask);
}

}  // namespace strata
