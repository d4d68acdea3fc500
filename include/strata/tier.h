// Where a state lives: the compute device (a GPU's memory, or host memory when the blocks run
// on the host), the store's cpu tier (host memory it owns, page-locked), or its nvme tier (the
// rank's swap file). One type for what the config says (offload_param / offload_optimizer
// "device": "none" is the device), what the plan places and what the store holds; the store
// itself keeps the cpu and nvme tiers only.
#pragma once

namespace strata {

enum class Tier { kDevice, kCpu, kNvme };
inline constexpr int kNumTiers = 3;

}  // namespace strata
