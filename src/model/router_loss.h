// Note [Router loss]
// The mixtures of experts' load-balancing loss (Switch Transformer's, as transformers'
// load_balancing_loss_func computes it when output_router_logits is set): over one
// micro-batch's rows of every sparse layer, with T_e the (row, choice) pairs routed to expert
// e and P_e the sum of the router's probabilities for e over R rows in all,
//   aux = E * sum_e (T_e / R) * (P_e / R),   added to the training loss times aux_loss_coef.
// Its gradient reaches a layer's router probabilities p[n, e] as coef * E * T_e / R^2 (T is
// a count: no gradient), which needs every layer's routing. Blocks run one at a time, so the
// engine hands a RouterLoss per micro-batch to its block forwards and recomputations
// (BlockContext::router_loss): each sparse layer's first forward adds its counts and sums; the head's
// pass finishes the loss (Finish) before its backward; and each layer's output carries an
// autograd node that, in that layer's backward (recomputed or kept), adds the gradient to its
// probabilities, scaled as the loss is (the loss scaler's factor).
#pragma once

#include <torch/types.h>

#include <cstdint>

#include "strata/communicator.h"

namespace strata::model {

// With rows split over a sequence group (Note [Ulysses]) each rank records its positions' T and
// P; Finish sums them (and R) over the group, so every rank has the rows' whole loss, and each
// rank's gradient to its own rows is scaled by the group's size: the engine's mean over the
// world divides by it, and the group's ranks hold disjoint rows of one loss.
class RouterLoss {
 public:
  RouterLoss(int64_t experts, int64_t top_k, double coef, Communicator* sequence_group = nullptr)
      : experts_(experts), top_k_(top_k), coef_(coef), group_(sequence_group) {}
  // A sparse layer's routing: probabilities [N, E] (fp32, with their graph) and the chosen
  // experts [N, top_k]. Returns `out` (the layer's MLP output) carrying the loss's gradient to
  // `probs`; the counts only before Finish.
  torch::Tensor Record(const torch::Tensor& out, const torch::Tensor& probs, const torch::Tensor& chosen);
  // coef * aux of the layers recorded (0 when none were). `seed`: what the loss's gradient is
  // scaled by in the backward (the loss scaler's factor).
  double Finish(double seed);
  // Record's gradient for rows of one layer: coef * E * T / R^2 * seed, [1, E] on `device`.
  torch::Tensor ProbGradient(const torch::Device& device) const;

 private:
  int64_t experts_, top_k_;
  double coef_;
  Communicator* group_ = nullptr;
  torch::Tensor tokens_, probs_;  // fp32 [E]: T and P so far
  double rows_ = 0, seed_ = 0;
  bool finished_ = false;
  torch::Tensor gradient_;  // fp32 [1, E], once finished
};


}  // namespace strata::model
