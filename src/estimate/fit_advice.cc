#include "src/estimate/fit_advice.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

namespace strata {

std::string FitAdvice(const TrainConfig& cfg, int world, DeviceTraits device, const MachineCapacity& m,
                      int local_ranks) {
  TrainConfig base = cfg;
  if (CheckFits(EstimateResolvingAutos(&base, world, 0, device, m, local_ranks), m, local_ranks).ok()) return "";
  struct Try {
    bool accumulator, moments;
  };
  std::string out;
  for (const Try t : {Try{true, false}, Try{false, true}, Try{true, true}}) {
    if ((t.accumulator && cfg.grad_accum_dtype == DType::kBF16) || (t.moments && cfg.adam_states == DType::kBF16))
      continue;
    TrainConfig c = cfg;
    std::vector<std::string> set, cost;
    if (t.accumulator) {
      c.grad_accum_dtype = DType::kBF16;
      set.push_back("strata.gradient_accumulator=bf16");
      cost.push_back("gradients summed in fp32 and rounded to bf16 once per micro-batch");
    }
    if (t.moments) {
      c.adam_states = DType::kBF16;
      set.push_back("strata.adam_states=bf16");
      cost.push_back("Adam's m and v stored in bf16");
    }
    const MemoryEstimate e = EstimateResolvingAutos(&c, world, 0, device, m, local_ranks);
    if (!CheckFits(e, m, local_ranks).ok()) continue;
    out += fmt::format("\n  fits with --set {}: host memory {}, NVMe {} ({})", fmt::join(set, " --set "),
                       HumanBytes(e.node_host_bytes(local_ranks)), HumanBytes(e.node_nvme_bytes(local_ranks)),
                       fmt::join(cost, "; "));
    if (!t.accumulator || !t.moments) break;  // the smallest change that fits
  }
  return out;
}

}  // namespace strata
