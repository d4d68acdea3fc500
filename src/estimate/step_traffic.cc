#include "src/estimate/step_traffic.h"

namespace strata {

StepTraffic EstimateStepTraffic(const TrainConfig& cfg, const MemoryLedger& ledger) {
  StepTraffic t;
  for (StateKind k : {StateKind::kMaster, StateKind::kAdamM, StateKind::kAdamV})
    t.states += ledger.At(k, Residence::kNvme);
  t.working = ledger.At(StateKind::kWorking, Residence::kNvme);
  const bool frozen = cfg.model.lora.enabled();  // the base weights are never written
  const bool served = !frozen && (cfg.optimizer_overlap == OptimizerOverlap::kForward ||
                                   cfg.optimizer_overlap == OptimizerOverlap::kSpeculative);
  const uint64_t working_reads = 2 * static_cast<uint64_t>(cfg.grad_accum);
  t.written = t.states + (frozen ? 0 : t.working);
  t.read_at_most = t.states + working_reads * t.working;
  t.read_served = t.read_at_most - (served ? t.working : 0);
  return t;
}

}  // namespace strata
