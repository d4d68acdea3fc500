// The decisions that need the machine: device accumulation, recompute, where block inputs
// wait, the schedule's fallback and host blocks, each "auto" settled by asking the estimator
// (src/estimate: pure functions of a config) whether a candidate fits `m`, and recorded in
// config->autos. SettleRunConfig (settle.h) calls EstimateSettlingAutos; the searches (fit
// advice, the largest fit) call it on configs of their own.
#pragma once

#include <cstdint>

#include "src/estimate/estimator.h"
#include "src/estimate/host_blocks_fit.h"

namespace strata {

// Settles strata.device_accumulation ("auto": on when the estimate with device accumulators,
// and recompute, fits `m`), then strata.recompute ("auto": keep every block's activations
// when the estimate with them fits), and returns the estimate of what will run.
MemoryEstimate EstimateResolvingAutos(SettledConfig* cfg, int world, int64_t params_override, DeviceTraits device,
                                      const MachineCapacity& m, int local_ranks);

// Settles strata.host_blocks "auto" (-1): with the optimizer states on NVMe, the
// most blocks MostHostBlocks finds (kAllBlocks: every block), else 0; `estimate`
// (the config's, before) becomes the one with that many. A set number stays. Returns whether
// it was "auto".
bool ResolveHostBlocks(SettledConfig* cfg, int world, int64_t params_override, DeviceTraits device,
                       const MachineCapacity& m, int local_ranks, MemoryEstimate* estimate);

// What `train` acts on: the autos EstimateResolvingAutos settles, then host blocks "auto"
// (ResolveHostBlocks, which needs them), and the estimate with all of them settled.
// *host_blocks_auto, when given: whether strata.host_blocks was "auto".
MemoryEstimate EstimateSettlingAutos(SettledConfig* cfg, int world, int64_t params_override, DeviceTraits device,
                                     const MachineCapacity& m, int local_ranks, bool* host_blocks_auto = nullptr);

}  // namespace strata
