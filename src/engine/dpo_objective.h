// Folder-private: DPO's part of a step (Note [DPO], src/model/dpo.h): the reference
// log-probabilities of every row of the data, and the loss of a micro-batch of pairs from the
// head's logits. The engine holds one when strata.objective is "dpo".
#pragma once

#include <torch/types.h>

#include <vector>

#include "src/model/model.h"
#include "src/model/dpo.h"
#include "strata/communicator.h"

namespace strata {

class DpoObjective {
 public:
  explicit DpoObjective(const model::DpoOptions& options) : options_(options) {}
  // Per row of the dataset (data::Batch::rows): the initial model's log-probability of its
  // completion.
  void SetReference(std::vector<double> logps) { reference_ = std::move(logps); }
  bool has_reference() const { return !reference_.empty(); }
  // The mean DPO loss of the micro-batch's pairs (rows: their dataset rows, on the host), its
  // rewards added to *tally. Undefined behaviour is refused: a row without a reference. With a
  // `sequence_group` (Note [Ulysses]) x holds this rank's positions of the rows, whose
  // log-probabilities are the group's sums.
  torch::Tensor Loss(model::Block& head, const torch::Tensor& x, const torch::Tensor& targets,
                     const torch::Tensor& mask, const torch::Tensor& rows, model::DpoTally* tally,
                     Communicator* sequence_group = nullptr) const;

 private:
  model::DpoOptions options_;
  std::vector<double> reference_;
};

// Per row of a micro-batch the log-probability of its trained targets under the head's logits
// (the reference pass).
torch::Tensor HeadRowLogProbs(model::Block& head, const torch::Tensor& x, const torch::Tensor& targets,
                              const torch::Tensor& mask);

}  // namespace strata
