// The update modes by strata.optimizer_overlap (each in a file of its own).
#include "src/engine/update/update_mode.h"

#include "src/engine/engine_impl.h"

namespace strata {

std::unique_ptr<UpdateMode> MakeInlineUpdate(Engine::Impl& m, bool step_waits);
std::unique_ptr<UpdateMode> MakeSpeculativeUpdate(Engine::Impl& m);
std::unique_ptr<UpdateMode> MakeDelayedUpdate(Engine::Impl& m);

std::unique_ptr<UpdateMode> MakeUpdateMode(Engine::Impl& m) {
  switch (m.cfg.optimizer_overlap) {
    case OptimizerOverlap::kNone: return MakeInlineUpdate(m, /*step_waits=*/true);
    case OptimizerOverlap::kForward: return MakeInlineUpdate(m, /*step_waits=*/false);
    case OptimizerOverlap::kSpeculative: return MakeSpeculativeUpdate(m);
    case OptimizerOverlap::kDelayed: return MakeDelayedUpdate(m);
  }
  return MakeInlineUpdate(m, false);
}

}  // namespace strata
