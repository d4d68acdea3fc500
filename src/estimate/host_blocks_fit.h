// With the optimizer states on NVMe: how many blocks (from the last) host memory can keep
// beside everything else, strata.host_blocks: their optimizer states and (on NVMe, not with the
// delayed update) working weights. Each such block's step skips the disk: 24 B/param of
// reads and writes less with fp32 states and bf16 working weights, 16 with bf16 m/v.
#pragma once

#include <cstdint>
#include <string>

#include "src/estimate/estimator.h"

namespace strata {

// Share of MemAvailable the estimate may fill: the estimate has been 2-3% off the measured
// peak either way, and the page cache that the swap files need is not in it.
inline constexpr double kHostBlocksFill = 0.9;

struct HostBlocksFit {
  int64_t blocks = 0;         // the most blocks whose states fit (kAllBlocks: every block's)
  MemoryEstimate estimate;    // the estimate with that many
};
inline constexpr int64_t kAllBlocks = int64_t{1} << 20;

// How messages name `blocks` host blocks: "every block", "the first block", "the first N blocks".
std::string HostBlocksPhrase(int64_t blocks);

// The most blocks, at least cfg.host_blocks, whose estimate stays within
// kHostBlocksFill of m.host_available; cfg.host_blocks itself (and its estimate) when not
// even that does. NVMe and the device are not judged: the caller's CheckFits does (a disk
// too small for the states as given may hold what the host blocks leave it). Only
// meaningful with offload_optimizer "nvme".
HostBlocksFit MostHostBlocks(const SettledConfig& cfg, int world, int64_t params_override, DeviceTraits device,
                             const MachineCapacity& m, int local_ranks);

}  // namespace strata
