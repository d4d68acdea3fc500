#include "src/estimate/host_blocks_fit.h"

#include <fmt/format.h>

namespace strata {

HostBlocksFit MostHostBlocks(const TrainConfig& cfg, int world, int64_t params_override, DeviceTraits device,
                             const MachineCapacity& m, int local_ranks) {
  auto estimate = [&](int64_t blocks) {
    TrainConfig c = cfg;
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

bool ResolveHostBlocks(TrainConfig* cfg, int world, int64_t params_override, DeviceTraits device,
                       const MachineCapacity& m, int local_ranks, MemoryEstimate* estimate) {
  if (cfg->host_blocks >= 0) return false;
  cfg->host_blocks = 0;
  if (cfg->offload_optimizer.device != Tier::kNvme) return true;
  HostBlocksFit f = MostHostBlocks(*cfg, world, params_override, device, m, local_ranks);
  cfg->host_blocks = f.blocks;
  *estimate = f.estimate;
  return true;
}

MemoryEstimate EstimateSettlingAutos(TrainConfig* cfg, int world, int64_t params_override, DeviceTraits device,
                                     const MachineCapacity& m, int local_ranks, bool* host_blocks_auto) {
  MemoryEstimate e = EstimateResolvingAutos(cfg, world, params_override, device, m, local_ranks);
  const bool was_auto = ResolveHostBlocks(cfg, world, params_override, device, m, local_ranks, &e);
  if (host_blocks_auto) *host_blocks_auto = was_auto;
  return e;
}

std::string HostBlocksPhrase(int64_t blocks) {
  if (blocks == kAllBlocks) return "every block";
  return blocks == 1 ? "the first block" : fmt::format("the first {} blocks", blocks);
}

}  // namespace strata
