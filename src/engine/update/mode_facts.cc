#include "src/engine/update/mode_facts.h"

namespace strata {

UpdateModeFacts FactsOf(const TrainConfig& cfg) {
  UpdateModeFacts f;
  switch (cfg.optimizer_overlap) {
    case OptimizerOverlap::kNone:
      f.one_version = true;
      f.update_hidden_behind = UpdateModeFacts::Hidden::kNothing;
      break;
    case OptimizerOverlap::kForward:
      f.one_version = f.forward_reads_write_backs = true;
      break;
    case OptimizerOverlap::kSpeculative:
      f.speculates = f.forward_reads_write_backs = true;
      f.reads_states_early = false;
      break;
    case OptimizerOverlap::kDelayed:
      f.parks = true;
      f.reads_states_early = false;
      f.update_hidden_behind = UpdateModeFacts::Hidden::kNextStep;
      break;
  }
  return f;
}

}  // namespace strata
