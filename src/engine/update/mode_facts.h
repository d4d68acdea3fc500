// What each update mode (strata.optimizer_overlap; update_mode.h) asks of the plan, the state
// format and the step's arithmetic: the facts the torch-free floor (ShardPlan, StateFormat,
// the estimator) needs, kept here with the modes so that nothing else names one.
#pragma once

#include "src/config/train_config.h"

namespace strata {

struct UpdateModeFacts {
  // The update replaces the working weights in one place ("none", "forward"): the fp32 master
  // may be kept in them, and split from them.
  bool one_version = false;
  // Blocks are updated during the backward from backups in host memory ("speculative").
  bool speculates = false;
  // New working weights are parked until the step beside the update has read the old ones
  // ("delayed"): a park pool; host blocks keep only their optimizer states.
  bool parks = false;
  // The next forward's first reads are served by the update's write-backs still in flight
  // ("forward", "speculative": the update ran before that forward; not "none", which waits,
  // nor "delayed", whose forward runs before its update).
  bool forward_reads_write_backs = false;
  // The mode's states are read early by the step (no: "speculative" and "delayed" read their own).
  bool reads_states_early = true;
  // What the update runs beside (the step-time model): nothing, the step waits for it
  // ("none"); the next forward ("forward", "speculative"); the whole next step ("delayed").
  enum class Hidden { kNothing, kNextForward, kNextStep };
  Hidden update_hidden_behind = Hidden::kNextForward;
};

UpdateModeFacts FactsOf(const TrainConfig& cfg);

}  // namespace strata
