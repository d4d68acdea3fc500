#include "src/estimate/estimate_flags.h"

#include <cmath>
#include <tuple>

namespace strata {

Status CheckEstimateFlags(const EstimateFlags& f) {
  if (f.params) {
    const double p = *f.params;
    if (!std::isfinite(p) || p < kFewestScaledParameters || p > kMostScaledParameters)
      return InvalidArgument("--params {}: must be a number of parameters from {:.0e} to {:.0e} (e.g. 7e9)", p,
                             kFewestScaledParameters, kMostScaledParameters);
  }
  for (auto [value, flag, what] :
       {std::tuple{f.host_memory, "--host-memory", "host memory"}, std::tuple{f.disk_free, "--disk-free", "free disk"},
        std::tuple{f.device_memory, "--device-memory", "GPU memory"}})
    if (value && *value == 0)
      return InvalidArgument("{} 0: a machine with no {} trains nothing; give its size (e.g. 64G), or leave the flag "
                             "out for this machine's own", flag, what);
  return Status();
}

MachineCapacity PlannedMachine(MachineCapacity m, const EstimateFlags& f) {
  if (f.host_memory) m.host_available = *f.host_memory;
  if (f.disk_free) {
    m.nvme_free = *f.disk_free;
    if (m.nvme_dir.empty()) m.nvme_dir = "(the planned swap folder)";
  }
  return m;
}

int64_t ScaledParameters(const EstimateFlags& f) { return f.params ? static_cast<int64_t>(*f.params) : 0; }

}  // namespace strata
