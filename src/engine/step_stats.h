// StepStats: what one training step reports (Engine::Step), for the progress lines, the
// metrics file and bench step. No LibTorch.
#pragma once

#include "src/model/dpo.h"

#include <cstdint>

namespace strata {

struct StepStats {
  int64_t step = 0;
  double loss = 0;        // mean over the step's micro-batches and ranks
  double grad_norm = 0;   // global, unscaled, before clipping (NaN/Inf when skipped)
  double lr = 0;
  double loss_scale = 1;
  bool skipped = false;   // fp16 overflow: no state was updated
  int64_t tokens = 0;     // tokens of the global batch
  double seconds = 0;     // wall time of the step on this rank
  double wait_s = 0;      // time the compute thread waited for transfers (exposed)
  // time the compute thread waited for the optimizer (its exposed part; with
  // strata.optimizer_overlap "forward" the optimizer of step s is waited for during step s+1)
  double optimizer_wait_s = 0;
  double compute_s = 0, comm_s = 0, optimizer_s = 0;
  // strata.optimizer_overlap "speculative": blocks updated during the backward, and of those
  // the ones redone because the step clipped (an overflow rolls them back: `skipped`).
  int speculated_blocks = 0, redone_blocks = 0;
  // Blocks whose share of the gradient norm was taken while the backward went on (Note
  // [Early gradient sums]: off the host, every block with a gradient).
  int early_sum_blocks = 0;
  uint64_t nvme_read_bytes = 0, nvme_write_bytes = 0;
  // strata.block_inputs "nvme": the saved block inputs' bytes written to the swap file, and
  // read back (not those still in memory when needed: Note [Block inputs in the tiers]).
  uint64_t block_inputs_written = 0, block_inputs_read = 0;
  // Mixtures of experts (Note [Expert-aware fetching]): over the step's visits of sparse layers
  // (forwards, recomputations), the experts some token chose, as the routers reported them, and
  // the experts' parts the fetches read (0 where every expert is fetched with its block).
  int64_t experts_routed = 0, experts_fetched = 0;
  // strata.objective "dpo": the step's pairs over every rank, and their rewards (Note [DPO]).
  model::DpoTally dpo;
};

}  // namespace strata
