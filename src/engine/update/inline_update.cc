// Note [Optimizer overlap]: with strata.optimizer_overlap "forward" (the default) the step
// returns once the update is launched; the next forward waits, block by block, only for the
// block it is about to use (AwaitBlock: its ready event). Exact: the global norm, and so the
// clip coefficient, is known before any block is updated, and every block is updated with
// the same hyper-parameters in the same order as the plain schedule ("none"), which waits for
// the whole update instead. Whatever reads the whole state (checkpoints, counters, export,
// restore, destruction) first Quiesce()s. Collectives stay on the compute thread: the
// stages 1-2 sharing of updated weights happens in AwaitBlock, in block order on every rank.
#include <numeric>

#include "src/engine/update/update_mode.h"

namespace strata {
namespace {

class InlineUpdate final : public UpdateMode {
 public:
  InlineUpdate(const UpdateModeParts& m, bool step_waits) : m_(m), step_waits_(step_waits) {}

  std::function<Status(UpdateJob&)> Launch(int64_t, const AdamHyperParams&) override {
    return [this](UpdateJob& job) {
      std::vector<int> blocks(m_.num_blocks());
      std::iota(blocks.begin(), blocks.end(), 0);
      Status s = m_.window.UpdateBlocks(job.hp, blocks, job.early, job.ready);
      DropStates(job.early);  // not consumed (not expected)
      return s;
    };
  }
  bool StepWaitsForUpdate() const override { return step_waits_; }

 private:
  UpdateModeParts m_;
  const bool step_waits_;
};

}  // namespace

std::unique_ptr<UpdateMode> MakeInlineUpdate(const UpdateModeParts& m, bool step_waits) {
  return std::make_unique<InlineUpdate>(m, step_waits);
}

}  // namespace strata
