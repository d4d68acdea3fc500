// `strata estimate --max`: the largest model of a config's shape that fits a machine, over
// the tier placements, beside the machine's physical limit.
#pragma once

#include <cstdint>

#include "src/engine/optimizer_rule.h"
#include "src/estimate/estimator.h"
#include "src/settle/settle_autos.h"

namespace strata {

struct LargestFit {
  int64_t parameters = 0;  // 0: not even 1 M parameters fit
  Tier params_on = Tier::kDevice, optimizer_on = Tier::kDevice;
  DType accumulator = DType::kF32;  // strata.gradient_accumulator of that fit
  int64_t host_blocks = 0;  // strata.host_blocks "auto" of that fit (states on NVMe; kAllBlocks: every block)
  MemoryEstimate estimate;  // of that model, placed so
};

// Searches the parameter count (the model scaled as `--params` scales it: layers and width)
// for each placement of (parameters, optimizer states): (cpu, cpu), (cpu, nvme), (nvme, nvme)
// at stage 3, (none, cpu), (none, nvme) below; NVMe placements only when `m` knows the free
// space, each with the config's gradient accumulator dtype and with bf16 (taken when it fits
// 5% more); states on NVMe with strata.host_blocks "auto" (the config's own setting is not
// kept: the most blocks host memory has room for). Activations as strata.recompute "auto"
// would choose. Fits are monotone in the count.
LargestFit FindLargestFit(const SettledConfig& cfg, int world, DeviceTraits device, const MachineCapacity& m);

// Bytes of training state per parameter with Adam: bf16 working 2 + fp32 master 4 + m 4 + v 4
// + fp32 gradient 4; (MemAvailable + free NVMe) / this is the machine's physical limit.
inline constexpr double kStateBytesPerParameter = 18;
// The same with the config's optimizer: 4 B less per fp32 state it does not keep (Lion, Adagrad: 14).
inline double StateBytesPerParameter(const TrainConfig& cfg) {
  return kStateBytesPerParameter - 4.0 * (2 - RuleOf(cfg.optimizer).moments());
}

}  // namespace strata
