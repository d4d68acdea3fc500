// The flags of `strata estimate` that describe a machine or scale the model, checked before
// any arithmetic: each must be a value a real machine or model could have. A machine with no
// host memory or no free disk is no machine (0 also means "unknown" to the fit check, which
// would then pass anything), and a parameter count that is not a finite, positive number in
// range used to be dropped silently for the config's own model.
#pragma once

#include <cstdint>
#include <optional>

#include "src/estimate/estimator.h"
#include "strata/status.h"

namespace strata {

struct EstimateFlags {
  std::optional<double> params;           // --params
  std::optional<uint64_t> host_memory;    // --host-memory
  std::optional<uint64_t> disk_free;      // --disk-free
  std::optional<uint64_t> device_memory;  // --device-memory
};

// --params range: a thousand parameters (a model scaled below that has blocks of a few
// elements) to 10^15 (the largest `--max` searches).
inline constexpr double kFewestScaledParameters = 1e3, kMostScaledParameters = 1e15;

// An error naming the flag, its value and what it may be.
Status CheckEstimateFlags(const EstimateFlags& flags);

// `probed` (this machine) with the machine the flags describe in place of its parts.
MachineCapacity PlannedMachine(MachineCapacity probed, const EstimateFlags& flags);

// The parameter count the estimate scales to (0: the config's own model).
int64_t ScaledParameters(const EstimateFlags& flags);

}  // namespace strata
