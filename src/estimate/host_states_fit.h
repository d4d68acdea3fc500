// With the optimizer states on NVMe: how many blocks' states (from the first) host memory
// can keep beside everything else, strata.optimizer_host_blocks. Each such block's update
// skips the disk (16 B/param of reads and writes with fp32 states, 8 with bf16 m/v).
#pragma once

#include <cstdint>

#include "src/estimate/estimator.h"

namespace strata {

// Share of MemAvailable the estimate may fill: the estimate has been 2-3% off the measured
// peak either way, and the page cache that the swap files need is not in it.
inline constexpr double kHostStatesFill = 0.9;

struct HostStatesFit {
  int64_t blocks = 0;         // the most blocks whose states fit (kAllBlocks: every block's)
  MemoryEstimate estimate;    // the estimate with that many
};
inline constexpr int64_t kAllBlocks = int64_t{1} << 20;

// The most blocks, at least cfg.optimizer_host_blocks, whose estimate stays within
// kHostStatesFill of m.host_available and fits `m`; cfg.optimizer_host_blocks itself (and its
// estimate) when not even that does. Only meaningful with offload_optimizer "nvme".
HostStatesFit MostOptimizerHostBlocks(const TrainConfig& cfg, int world, int64_t params_override, DeviceTraits device,
                                      const MachineCapacity& m, int local_ranks);

// Settles strata.optimizer_host_blocks "auto" (-1): with the optimizer states on NVMe, the
// most blocks MostOptimizerHostBlocks finds (kAllBlocks: every block), else 0; `estimate`
// (the config's, before) becomes the one with that many. A set number stays. Returns whether
// it was "auto".
bool ResolveOptimizerHostBlocks(TrainConfig* cfg, int world, int64_t params_override, DeviceTraits device,
                                const MachineCapacity& m, int local_ranks, MemoryEstimate* estimate);

}  // namespace strata
