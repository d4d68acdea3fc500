// Settling what the user wrote into the config of one run (RunConfig), in the one order that
// keeps the decisions consistent:
//   1. the batch keys for the world (DeepSpeed's rule; an inconsistency is an error);
//   2. the compute dtype: bf16.enabled "auto" from where blocks run;
//   3. device accumulation, then recompute, from the memory estimate on this machine;
//   4. host blocks "auto", which needs both (the most blocks whose states host memory holds);
//   5. what only the shard plan can check (the split master's needs);
//   6. strata.steps from strata.data.epochs, when the data's size is known (the schedule,
//      settled in 2, still ends where strata.steps said).
// Every caller that runs or describes a run goes through here: train, config check,
// estimate, bench step and bench tune, and the tests.
#pragma once

#include <cstdint>

#include "src/config/run_config.h"
#include "src/estimate/estimator.h"
#include "src/estimate/longest_sequence.h"

namespace strata {

struct SettleContext {
  int world = 1;        // ranks of the run
  int local_ranks = 1;  // ranks sharing this machine's memory
  bool on_gpu = false;  // blocks run on a GPU (bf16 "auto" takes bf16 there)
  DeviceTraits device;  // where blocks run (the plan's view: the host or not)
  // The machine the run is judged against; null: no machine (a test, bench step), and every
  // "auto" that needs one takes its safe value: recompute, no device accumulation, no host blocks.
  const MachineCapacity* machine = nullptr;
  int64_t params_override = 0;  // `estimate --params N`: the model rescaled to N parameters
  // The training split's windows (or rows of examples) per epoch, when the data has been read:
  // with strata.data.epochs the run ends after its epochs (the last partial batch dropped) or at
  // strata.steps, whichever comes first. 0: not known (config check, estimate).
  int64_t epoch_windows = 0;
};

struct SettledRun {
  RunConfig config;
  MemoryEstimate estimate;        // of the settled config (empty without a machine)
  bool host_blocks_auto = false;  // strata.host_blocks was "auto"
};

StatusOr<SettledRun> SettleRunConfig(TrainConfig written, const SettleContext& context);

// For FindLongestSequence (`estimate --max-seq`): `written` at a length, settled as `train`
// settles it, judged against context.machine (required; it must outlive the function).
FitsAtLength SettledFitsAtLength(const TrainConfig& written, const SettleContext& context);

}  // namespace strata
