#include "src/settle/fit_advice.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "src/engine/optimizer_rule.h"
#include "src/settle/settle_autos.h"

namespace strata {

std::string FitAdvice(const SettledConfig& cfg, int world, int64_t params_override, DeviceTraits device,
                      const MachineCapacity& m, int local_ranks) {
  SettledConfig base = cfg;
  if (CheckFits(EstimateResolvingAutos(&base, world, params_override, device, m, local_ranks), m, local_ranks).ok())
    return "";
  enum class Moments { kAsGiven, kBf16, k8Bit };
  struct Try {
    bool accumulator;
    Moments moments;
  };
  const std::string states = AdamStatesSetting(cfg);
  // Compressed states only where the optimizer's row allows them (Adam's; Note [Optimizer rules]).
  const bool compact = RuleOf(cfg.optimizer).compact_moments;
  const bool moments_bf16 = states != "fp32" || !compact;  // (as small or smaller, or none to try)
  const bool may_8bit = states != "8bit" && compact;
  std::string out;
  // With the states on NVMe, every try keeps as many blocks' states in host memory as it has
  // room for (lossless: the first try is that alone), named when it is more than the config's.
  const bool host_blocks = cfg.offload_optimizer.device == Tier::kNvme && cfg.host_blocks >= 0;
  for (const Try t : {Try{false, Moments::kAsGiven}, Try{true, Moments::kAsGiven}, Try{false, Moments::kBf16},
                      Try{true, Moments::kBf16}, Try{false, Moments::k8Bit}, Try{true, Moments::k8Bit}}) {
    if ((t.accumulator && cfg.grad_accum_dtype == DType::kBF16) || (t.moments == Moments::kBf16 && moments_bf16) ||
        (t.moments == Moments::k8Bit && !may_8bit) ||
        (!t.accumulator && t.moments == Moments::kAsGiven && !host_blocks))
      continue;
    SettledConfig c = cfg;
    if (host_blocks) c.host_blocks = -1;
    std::vector<std::string> set, cost;
    if (t.accumulator) {
      c.grad_accum_dtype = DType::kBF16;
      set.push_back("strata.gradient_accumulator=bf16");
      cost.push_back("gradients summed in fp32 and rounded to bf16 once per micro-batch");
    }
    if (t.moments == Moments::kBf16) {
      SetAdamStates(&c, "bf16");
      set.push_back("strata.adam_states=bf16");
      cost.push_back("Adam's m and v stored in bf16");
    } else if (t.moments == Moments::k8Bit) {
      SetAdamStates(&c, "8bit");
      if (!CheckKeys(c).ok()) continue;  // not with every other setting (the speculative update)
      set.push_back("strata.adam_states=8bit");
      cost.push_back("Adam's m and v stored in 8 bits per 256-element block");
    }
    const MemoryEstimate e = EstimateSettlingAutos(&c, world, params_override, device, m, local_ranks);
    if (!CheckFits(e, m, local_ranks).ok()) continue;
    if (c.host_blocks > cfg.host_blocks) {
      set.insert(set.begin(), "strata.host_blocks=auto");
      cost.insert(cost.begin(), fmt::format("the states of {} in host memory, not on the disk: lossless",
                                            HostBlocksPhrase(c.host_blocks)));
    } else if (set.empty()) {
      continue;  // host blocks alone: none more
    }
    out += fmt::format("\n  fits with --set {}: host memory {}, NVMe {} ({})", fmt::join(set, " --set "),
                       HumanBytes(e.node_host_bytes(local_ranks)), HumanBytes(e.node_nvme_bytes(local_ranks)),
                       fmt::join(cost, "; "));
    break;  // the least lossy change that fits
  }
  return out;
}

}  // namespace strata
