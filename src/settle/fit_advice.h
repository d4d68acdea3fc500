// What to change when a config does not fit: host blocks (strata.host_blocks "auto",
// lossless), then the opt-in compressions of the state that live in host memory or on NVMe
// (strata.gradient_accumulator "bf16", strata.adam_states "bf16" then "8bit"), tried
// alone and together with the config's tiers, least lossy first, so that
// `estimate` and `train` can name the one that fits instead of only saying no.
#pragma once

#include <string>

#include "src/estimate/estimator.h"

namespace strata {

// "" when `cfg` fits or no compression makes it fit; else a line for the first setting that
// fits, with the bytes it needs and what it costs in precision.
// params_override as EstimateMemory's (`estimate --params`; 0: the config's model).
std::string FitAdvice(const SettledConfig& cfg, int world, int64_t params_override, DeviceTraits device,
                      const MachineCapacity& m, int local_ranks);

}  // namespace strata
