// Folder-private: how the optimizer's update runs against the steps (strata.optimizer_overlap).
// One file per mode, each owning its state behind this interface; a new mode is a new file
// (and its facts in mode_facts.cc):
//   inline_update.cc       "none": the step waits for its update; "forward" (the default): the
//                          step returns once the update is launched, and the next forward waits
//                          block by block (Note [Optimizer overlap])
//   speculative_update.cc  as "forward", and blocks updated during the backward, assuming no
//                          clipping and no overflow (Note [Speculative update])
//   delayed_update.cc      ZeRO-Offload's one-step delayed update (Note [Delayed update])
// The step calls the compute-thread hooks in the order below; the update itself runs on the
// optimizer thread (what Launch returns), through the UpdateWindow.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "src/device/work_queue.h"
#include "src/engine/engine_parts.h"
#include "src/engine/update/update_window.h"
#include "strata/cpu_adam.h"

namespace strata {

// The micro-batch a step is running (what the hooks and the gradient path need of it).
struct MicroBatch {
  int64_t step = 0;
  int64_t index = 0;        // 0 .. gradient_accumulation_steps - 1
  bool first = false;       // writes the accumulators
  bool last = false;        // its reduced gradients are the step's final ones
  uint64_t sample = 0;      // this rank's data index (LoRA dropout's seed)
};

// What the step's gradients say of the updates made assuming no clipping and no overflow.
enum class Verdict {
  kStands,    // no clipping, no overflow: they are the step's
  kRedo,      // clipping: restored, and updated again with the clip coefficient
  kRollBack,  // overflow, or the step failed: restored, no update
};

// One step's update, as the optimizer thread runs it.
struct UpdateJob {
  AdamHyperParams hp;
  Verdict verdict = Verdict::kStands;
  EarlyStates early;                                   // states the step read ahead for it
  std::vector<std::shared_ptr<HostEventState>> ready;  // per block: its update is done
};

class UpdateMode {
 public:
  virtual ~UpdateMode() = default;
  // Creation: what the mode keeps besides the plan's pools (the speculation backups).
  virtual Status Allocate() { return Status(); }

  // --- the step, on the compute thread ---
  // The compute reads a block only once its update is done (not beside a delayed update).
  virtual bool ComputeWaits() const { return true; }
  // The update's first states may be read during the last micro-batch (mode_facts.h).
  virtual bool ReadsStatesEarly() const { return true; }
  // The last micro-batch of `step` begins.
  virtual void BeginLastMicroBatch(int64_t step) {}
  // Block b's weights were read for the last time in `mb` (its gradients are reduced next).
  virtual void DoneReading(int b, const MicroBatch& mb) {}
  // Before block b's reduced gradient is added to its accumulator.
  virtual Status BeforeAccumulate(int b) { return Status(); }
  // Block b's gradient of the step is final once `added` happened (last micro-batch only).
  virtual void GradientFinal(int b, const Event& added) {}
  // The step's micro-batches ended, whether or not they succeeded.
  virtual void MicroBatchesEnded() {}
  // What the mode updated early in this step is void (the step failed, or overflowed).
  virtual Status Abandon() { return Status(); }
  // Blocks updated early in this step (StepStats::speculated_blocks).
  virtual int EarlyBlocks() const { return 0; }

  // --- the update ---
  // Compute thread: the update of `step` with `hp` is launched; what the optimizer thread runs.
  virtual std::function<Status(UpdateJob&)> Launch(int64_t step, const AdamHyperParams& hp) = 0;
  // The step waits for its own update ("none").
  virtual bool StepWaitsForUpdate() const { return false; }
  // Before anything reads the whole state: the mode's leftovers go home (parked weights).
  virtual Status Quiesce() { return Status(); }
};

// What an update mode uses of the engine: the plan, the blocks and the store (with its pools),
// the window it runs the update through, the optimizer thread, whether a block's update is
// done, the ledger (the speculation backups), the tracer, the next update's hyper-parameters,
// and the settings that choose it.
struct UpdateModeParts {
  const ShardPlan& plan;
  ModelBlocks& model;
  StateStore& state;
  UpdateWindow& window;
  WorkQueue& thread;
  BlockReadiness& readiness;
  MemoryLedger& ledger;
  Tracer* tracer = nullptr;
  std::function<AdamHyperParams()> next_hyper_params;
  OptimizerOverlap overlap = OptimizerOverlap::kForward;  // strata.optimizer_overlap
  int64_t delayed_update_from = 0;                        // strata.delayed_update_from
  int num_blocks() const { return static_cast<int>(model.blocks.size()); }
};

std::unique_ptr<UpdateMode> MakeUpdateMode(const UpdateModeParts& parts);

}  // namespace strata
