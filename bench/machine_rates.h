// This machine's rates for the step-time model (src/estimate/step_time.h), measured in seconds
// with the paths a step uses: the engine itself, on two layers of the config's width at the
// shape of a block's pass, everything in host memory (its compute spans split into a layer's
// share and the rest: forward, recomputation where the config recomputes, backward, the head,
// the gradients added into the accumulators); the CPU Adam kernel with its bf16 copy; memcpy
// and xxh3 (the gather copies and the tier's checksums); the NVMe tier's reads, writes and both
// at once at the config's aio setting (the swap folder's drive). `bench links` and `bench adam`
// measure the same paths at length, against their anchors.
#pragma once

#include "src/config/train_config.h"
#include "src/estimate/step_time.h"
#include "strata/status.h"

namespace strata::bench {

// Blocks on the host (a CPU build, or strata.device "cpu"). The NVMe rows only when the config
// puts something on NVMe (else their rate stays 0: nothing to move).
StatusOr<MachineRates> MeasureThisMachine(const SettledConfig& cfg);

}  // namespace strata::bench
