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

LinkTraffic EstimateLinkTraffic(const TrainConfig& cfg, const ShardPlan& plan) {
  LinkTraffic t;
  const int n = static_cast<int>(plan.blocks.size());
  if (plan.host_device || n == 0) return t;
  auto frozen = [&](int b) { return plan.blocks[b].trainable_begin >= plan.blocks[b].layout.numel; };
  auto gathered = [&](int b) -> uint64_t {  // one gather's copy in (Gatherer::Issue)
    if (plan.resident[b]) return 0;
    const ShardLayout& l = plan.blocks[b].layout;
    return static_cast<uint64_t>(plan.weights_sharded ? l.shard : l.padded) * plan.dsize;
  };
  uint64_t per_micro_batch = gathered(n - 1);  // the head: forward and backward in one visit
  for (int b = 0; b < n - 1; ++b) per_micro_batch += gathered(b) + (b > 0 || !frozen(0) ? gathered(b) : 0);
  if (plan.tied_owner >= 0 && !plan.tied_slot) per_micro_batch += gathered(plan.tied_owner);  // again for the head
  const auto micro_batches = static_cast<uint64_t>(cfg.grad_accum);
  t.in = micro_batches * per_micro_batch;
  const bool scatter = plan.grads_sharded && !plan.lora && plan.world > 1;
  for (int b = 0; b < n; ++b) {
    const BlockPlan& bp = plan.blocks[b];
    if (plan.resident[b] && bp.optimizer.len > 0) t.in += static_cast<uint64_t>(bp.optimizer.len) * plan.dsize;
    if (frozen(b)) continue;
    const uint64_t copied = plan.device_accum ? bp.grad.len : scatter ? bp.layout.shard : plan.GradFlatLen(b);
    t.out += (plan.device_accum ? 1 : micro_batches) * copied * 4;
  }
  return t;
}

}  // namespace strata
