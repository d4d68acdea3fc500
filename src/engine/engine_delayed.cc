// Note [Delayed update]: strata.optimizer_overlap "delayed" is ZeRO-Offload's one-step
// delayed parameter update (Ren et al. 2021, "ZeRO-Offload", section 5), opt-in because it
// changes the arithmetic: the update of step s, launched when step s's backward is done,
// runs on the optimizer thread during step s+1, whose forward and backward use the weights
// from before it. So step s+1's gradient is taken at the weights of step s-1's update (one
// step stale); step 0 and the step after a Quiesce (a checkpoint, an evaluation: anything
// that reads the whole state) see the latest weights, as a resumed run does.
//
// Why: with the optimizer's states on NVMe its pass moves 18-28 B/param through the disk;
// the exact schedules wait for it after the backward ("forward": the next forward waits
// block by block), so a disk-bound step is backward + the whole pass. Delayed, the pass runs
// beside the next step's whole forward and backward.
//
// How, without a second copy of the weights on disk: the update goes from the last block
// down (the order the backward reaches them). Each block's new working weights go to a
// parking buffer (pools.park, ShardPlan::park_pool) instead of to NVMe, and are written home
// only once the step running beside the update has read the old ones for the last time
// (ReduceGradients of that block in its last micro-batch: ReleaseOldWeights); the update
// writes them (ParkedWrites), and ends once every parked block is written. The step's
// reduced gradient of block b waits until the update has read and zeroed b's accumulator
// (AwaitGradientsFree). With the parking pool full the update waits for the backward to
// release a block; the backward waits for the update only where the update is behind it.
// With gradient accumulation the first micro-batch's gradients of every block wait for the
// update while the old weights stay in use until the last one: the pool parks every block.
// Needs the working weights on NVMe (train_config.cc: CheckDelayedUpdate).
#include "src/engine/engine_impl.h"

namespace strata {

Status Engine::Impl::AwaitGradientsFree(int b) {
  return DelayedRun() ? WaitForUpdate(b, "delayed update") : Status();
}

void Engine::Impl::ReleaseOldWeights(int b) {
  if (DelayedRun() && last_micro_batch) optimizer.run.parked->Release(b);
}

}  // namespace strata
