// The update modes by strata.optimizer_overlap (each in a file of its own).
#include "src/engine/update/update_mode.h"


namespace strata {

std::unique_ptr<UpdateMode> MakeInlineUpdate(const UpdateModeParts& m, bool step_waits);
std::unique_ptr<UpdateMode> MakeSpeculativeUpdate(const UpdateModeParts& m);
std::unique_ptr<UpdateMode> MakeDelayedUpdate(const UpdateModeParts& m);

std::unique_ptr<UpdateMode> MakeUpdateMode(const UpdateModeParts& m) {
  switch (m.overlap) {
    case OptimizerOverlap::kNone: return MakeInlineUpdate(m, /*step_waits=*/true);
    case OptimizerOverlap::kForward: return MakeInlineUpdate(m, /*step_waits=*/false);
    case OptimizerOverlap::kSpeculative: return MakeSpeculativeUpdate(m);
    case OptimizerOverlap::kDelayed: return MakeDelayedUpdate(m);
  }
  return MakeInlineUpdate(m, false);
}

}  // namespace strata
