#include "src/estimate/host_blocks_fit.h"

#include <fmt/format.h>

namespace strata {

HostBlocksFit MostHostBlocks(const SettledConfig& cfg, int world, int64_t params_override, DeviceTraits device,
                             const MachineCapacity& m, int local_ranks) {
  auto estimate = [&](int64_t blocks) {
    SettledConfig c = cfg;
    c.host_blocks = blocks;
    return EstimateMemory(c, world, params_override, device);
  };
  // Host memory only: each block kept there takes its bytes off the disk, so a disk too small
  // for the states as given may be just what host blocks need (the caller checks the rest).
  auto fits = [&](const MemoryEstimate& e) {
    return static_cast<double>(e.node_host_bytes(local_ranks)) <=
           kHostBlocksFill * static_cast<double>(m.host_available);
  };
  HostBlocksFit best{cfg.host_blocks, estimate(cfg.host_blocks)};
  if (!fits(best.estimate)) return best;
  if (MemoryEstimate all = estimate(kAllBlocks); fits(all)) return {kAllBlocks, all};
  int64_t lo = best.blocks, hi = kAllBlocks;  // fits(lo), !fits(hi); host bytes grow with the count
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    MemoryEstimate e = estimate(mid);
    if (fits(e)) {
      lo = mid;
      best = {mid, e};
    } else {
      hi = mid;
    }
  }
  return best;
}

std::string HostBlocksPhrase(int64_t blocks) {
  if (blocks == kAllBlocks) return "every block";
  return blocks == 1 ? "the first block" : fmt::format("the first {} blocks", blocks);
}

}  // namespace strata
