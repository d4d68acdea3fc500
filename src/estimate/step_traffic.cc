#include "src/estimate/step_traffic.h"

#include "src/engine/update/mode_facts.h"

namespace strata {

StepTraffic EstimateStepTraffic(const TrainConfig& cfg, const ShardPlan& plan) {
  const MemoryLedger& ledger = plan.ledger;
  StepTraffic t;
  for (StateKind k : {StateKind::kMaster, StateKind::kAdamM, StateKind::kAdamV})
    t.states += ledger.At(k, Residence::kNvme);
  t.working = ledger.At(StateKind::kWorking, Residence::kNvme);
  const bool frozen = cfg.model.lora.enabled();  // the base weights are never written
  const bool served = !frozen && FactsOf(cfg).forward_reads_write_backs;
  // Forward and backward of each pass (each micro-batch, or once layer-major); an update whose master the working weights hold
  // (split: its high halves; fp32 compute: all of it) reads the weights it replaces once more.
  const uint64_t working_reads = 2 * static_cast<uint64_t>(BlockPasses(cfg)) + (plan.format.MasterFromWorking() && !frozen ? 1 : 0);
  t.written = t.states + (frozen ? 0 : t.working);
  t.read_at_most = t.states + working_reads * t.working;
  t.read_served = t.read_at_most - (served ? t.working : 0);
  if (cfg.block_inputs_at == BlockInputsAt::kNvme && !cfg.keep_activations) {  // each layer's input, each micro-batch
    const auto inputs = static_cast<uint64_t>(cfg.micro_batch * cfg.model.seq_len * cfg.model.d_model * cfg.grad_accum *
                                              cfg.model.n_layer) * plan.dsize;
    t.written += inputs;
    t.read_at_most += inputs;
    t.read_served += inputs;
  }
  return t;
}

LinkTraffic EstimateLinkTraffic(const TrainConfig& cfg, const ShardPlan& plan) {
  LinkTraffic t;
  if (plan.host_device || plan.blocks.empty()) return t;
  // Every gather of a block that is not resident copies its shard (or, unsharded, its whole
  // group) in (Gatherer::Issue), once per visit of the engine's own plan.
  for (const Visit& v : plan.Visits(static_cast<int>(BlockPasses(cfg)), /*backward=*/true)) {
    if (plan.resident[v.block]) continue;
    const ShardLayout& l = plan.blocks[v.block].layout;
    t.in += static_cast<uint64_t>(plan.weights_sharded ? l.shard : l.padded) * plan.dsize;
  }
  const auto micro_batches = static_cast<uint64_t>(cfg.grad_accum);
  for (int b = 0; b < static_cast<int>(plan.blocks.size()); ++b) {
    const BlockPlan& bp = plan.blocks[b];
    if (plan.resident[b] && bp.optimizer.len > 0) t.in += static_cast<uint64_t>(bp.optimizer.len) * plan.dsize;
    if (plan.Frozen(b)) continue;
    const uint64_t copied = plan.device_accum        ? bp.grad.len
                            : plan.ScattersGradients() ? bp.layout.shard
                                                       : plan.GradFlatLen(b);
    t.out += (plan.device_accum ? 1 : micro_batches) * copied * 4;
  }
  return t;
}

}  // namespace strata
