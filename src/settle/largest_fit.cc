#include "src/settle/largest_fit.h"

#include <cmath>
#include <utility>
#include <vector>

namespace strata {
namespace {

// Whether `params` parameters fit with this placement; the estimate of what would run and the
// host blocks "auto" settled on, as `train` would settle them.
bool Fits(const SettledConfig& placed, int world, int64_t params, DeviceTraits device, const MachineCapacity& m,
          MemoryEstimate* e, int64_t* host_blocks) {
  SettledConfig c = placed;
  *e = EstimateSettlingAutos(&c, world, params, device, m, world);
  *host_blocks = c.host_blocks;
  return CheckFits(*e, m, world).ok();
}

}  // namespace

LargestFit FindLargestFit(const SettledConfig& cfg, int world, DeviceTraits device, const MachineCapacity& m) {
  using D = Tier;
  std::vector<std::pair<D, D>> placements;
  if (cfg.zero_stage == 3) placements = {{D::kCpu, D::kCpu}, {D::kCpu, D::kNvme}, {D::kNvme, D::kNvme}};
  else placements = {{D::kDevice, D::kCpu}, {D::kDevice, D::kNvme}};
  // The host gradient accumulators: the config's dtype, and bf16 (2 B/param instead of 4 in
  // host memory, opt-in through strata.gradient_accumulator) when that is more.
  std::vector<DType> accumulators = {cfg.grad_accum_dtype};
  if (cfg.grad_accum_dtype != DType::kBF16) accumulators.push_back(DType::kBF16);
  LargestFit best;
  for (DType accumulator : accumulators)
  for (auto [params_on, optimizer_on] : placements) {
    if ((params_on == D::kNvme || optimizer_on == D::kNvme) && m.nvme_free == 0) continue;  // unbounded
    SettledConfig placed = cfg;
    placed.offload_param.device = params_on;
    placed.offload_optimizer.device = optimizer_on;
    placed.grad_accum_dtype = accumulator;
    // States on NVMe: host memory keeps as many blocks' as it has room for ("auto"); bitwise
    // the same run, and a disk smaller than the states then holds a larger model.
    placed.host_blocks = optimizer_on == D::kNvme ? -1 : 0;
    MemoryEstimate fits, e;  // `fits`: the estimate at lo, the largest count known to fit
    int64_t host_blocks = 0, blocks = 0;
    double lo = std::log(1e6), hi = std::log(1e15);  // bisect on log(parameters)
    if (!Fits(placed, world, static_cast<int64_t>(std::exp(lo)), device, m, &fits, &host_blocks)) continue;
    for (int i = 0; i < 48; ++i) {
      const double mid = (lo + hi) / 2;
      if (Fits(placed, world, static_cast<int64_t>(std::exp(mid)), device, m, &e, &blocks)) {
        lo = mid;
        fits = e;
        host_blocks = blocks;
      } else {
        hi = mid;
      }
    }
    // A bf16 accumulator is taken only when it fits a larger model (5% more: not for noise).
    const double margin = accumulator == cfg.grad_accum_dtype ? 1.0 : 1.05;
    if (fits.parameters > best.parameters * margin)
      best = {static_cast<int64_t>(fits.parameters), params_on, optimizer_on, accumulator, host_blocks, fits};
  }
  return best;
}

}  // namespace strata
