// Note [Ulysses]
// DeepSpeed Ulysses' sequence parallelism: each of the S ranks of a sequence group holds T / S
// consecutive positions of every row (rank s: positions s·T/S .. (s+1)·T/S - 1). Everything in a
// block works position by position, except attention, which needs the whole row: before it an
// all-to-all trades positions for heads (rank s then holds heads s·H/S .. (s+1)·H/S - 1 of all T
// positions), attention runs on whole rows for those heads, and a second all-to-all trades
// them back. Each all-to-all is the other's inverse, so the gradient of one is the other
// applied to the incoming gradient. Key and value heads split like the query heads, so a
// group of S needs S to divide the key/value heads (grouped-query attention with fewer
// key/value heads than ranks is refused, naming both). The group's all-to-alls run on the
// block's thread, in the block's order, on every rank alike, forward, recomputation and
// backward: ranks meet in the same collective because they run the same blocks. The other
// things that see more than one position keep their whole-row meaning: packed examples' layout
// stays whole (each rank reads its positions' part; attention runs per example on whole rows),
// LoRA dropout draws the whole rows' masks (LoraDropout), the experts' load-balancing loss
// sums its counts over the group (RouterLoss), a loss mask weighs each rank's positions by
// their own trained targets (BatchLossWeights), and DPO's per-row log-probabilities are the
// group's sums of each rank's positions (RowTotalsOverGroup).
#pragma once

#include <torch/types.h>

#include "strata/communicator.h"

namespace strata::model {

// x [B, H, T/S, D], this rank's positions of every head -> [B, H/S, T, D], this rank's heads
// of every position. `group` is the sequence group (Note [Process mesh]); H % S == 0.
torch::Tensor SequenceToHeads(const torch::Tensor& x, Communicator& group);

// The inverse: x [B, H/S, T, D] -> [B, H, T/S, D].
torch::Tensor HeadsToSequence(const torch::Tensor& x, Communicator& group);

// partial [B]: per row, a sum over this rank's positions -> the sum over the whole rows, on
// every member alike. A loss of these totals, which every member then computes alike, flows
// back to each member's positions times the group's size S: the engine's mean over the world
// (S members of each row's group) then counts each row's gradient once.
torch::Tensor RowTotalsOverGroup(const torch::Tensor& partial, Communicator& group);

}  // namespace strata::model
