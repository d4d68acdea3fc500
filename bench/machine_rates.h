// This machine's rates for the step-time model (src/estimate/step_time.h), measured in a few
// seconds with the paths a step uses: one block of the config's model through a training pass
// (forward, recomputation where the config recomputes, backward) at its micro-batch shape and
// compute dtype; the CPU Adam kernel with its bf16 copy; the host's gradient accumulation
// (flattening a block's gradients and adding them); the NVMe tier's reads and writes at the
// config's aio setting (the swap folder's drive). `bench links` and `bench adam` measure the
// same paths at length, against their anchors.
#pragma once

#include "src/config/train_config.h"
#include "src/estimate/step_time.h"
#include "strata/status.h"

namespace strata::bench {

// Blocks on the host (a CPU build, or strata.device "cpu"). The NVMe rows only when the config
// puts something on NVMe (else their rate stays 0: nothing to move).
StatusOr<MachineRates> MeasureThisMachine(const TrainConfig& cfg);

}  // namespace strata::bench
