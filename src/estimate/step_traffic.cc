#include "src/estimate/step_traffic.h"

#include <cmath>

#include "src/engine/update/mode_facts.h"
#include "src/estimate/expert_traffic.h"

namespace strata {
namespace {

double ShareAt(const SettledConfig& cfg, int64_t tokens) {
  return ExpectedExpertShare(cfg.model.moe.num_experts, cfg.model.moe.top_k, tokens);
}

// Per pass (every block visited once, forward or backward), the expected bytes of the working
// tensors on NVMe that routing leaves unread: the experts no token chose.
uint64_t UnroutedNvmeBytes(const SettledConfig& cfg, const ShardPlan& plan, double share) {
  double unread = 0;
  for (int b = 0; b < static_cast<int>(plan.blocks.size()); ++b) {
    if (!plan.FetchesRouted(b) || plan.WorkingTier(b) != Tier::kNvme) continue;
    const BlockPlan& bp = plan.blocks[b];
    unread += (1 - share) * static_cast<double>(ExpertBytesIn(plan, b, {bp.working.begin, bp.working_tensor_len()}));
  }
  return static_cast<uint64_t>(std::llround(unread));
}

// The bytes of the optimizer states on NVMe that lie in experts (their sub-groups: none
// straddles an expert's end), master, m and v: those of an expert no token of the step chose
// are not written back where the update skips it (strata.expert_update "chosen", Note
// [Expert updates]).
uint64_t ExpertStateBytesOnNvme(const ShardPlan& plan) {
  uint64_t bytes = 0;
  for (int b = 0; b < static_cast<int>(plan.blocks.size()); ++b) {
    const BlockPlan& bp = plan.blocks[b];
    if (bp.experts.count == 0 || plan.OptimizerTier(b) != Tier::kNvme) continue;
    for (int64_t g = 0; g < bp.num_sub_groups(); ++g) {
      const ElementRange r = bp.sub_group(g);
      if (bp.ExpertAt(r.begin) < 0) continue;
      for (TensorRole role : kStateRoles)
        bytes += plan.format.StoredBytes(role, r.len);
    }
  }
  return bytes;
}

}  // namespace

StepTraffic EstimateStepTraffic(const SettledConfig& cfg, const ShardPlan& plan) {
  return EstimateStepTraffic(cfg, plan, TokensPerVisit(cfg, plan));
}

StepTraffic EstimateStepTraffic(const SettledConfig& cfg, const ShardPlan& plan, int64_t tokens_per_visit) {
  const MemoryLedger& ledger = plan.ledger;
  StepTraffic t;
  for (StateKind k : {StateKind::kMaster, StateKind::kAdamM, StateKind::kAdamV})
    t.states += ledger.At(k, Tier::kNvme);
  t.working = ledger.At(StateKind::kWorking, Tier::kNvme);
  const bool frozen = cfg.model.lora.enabled();  // the base weights are never written
  const bool served = !frozen && FactsOf(cfg).forward_reads_write_backs;
  // Forward and backward of each pass (each micro-batch, or once layer-major); an update whose master the working weights hold
  // (split: its high halves; fp32 compute: all of it) reads the weights it replaces once more, whole.
  const uint64_t visits = 2 * static_cast<uint64_t>(BlockPasses(cfg));
  const uint64_t working_reads = visits + (plan.format.MasterFromWorking() && !frozen ? 1 : 0);
  const uint64_t unread = UnroutedNvmeBytes(cfg, plan, ShareAt(cfg, tokens_per_visit));
  // With "chosen", an expert no token of the step (any micro-batch, any rank) chose keeps its states.
  const double step_share = ShareAt(cfg, cfg.micro_batch * cfg.model.seq_len * cfg.grad_accum * plan.world);
  const auto kept = cfg.expert_update == ExpertUpdate::kAll
                        ? uint64_t{0}
                        : static_cast<uint64_t>(std::llround((1 - step_share) * static_cast<double>(ExpertStateBytesOnNvme(plan))));
  t.written = t.states - kept + (frozen ? 0 : t.working);
  t.read_all_experts = t.states + working_reads * t.working;
  t.read_at_most = t.read_all_experts - visits * unread;
  t.read_served = t.read_at_most - (served ? t.working - unread : 0);
  if (cfg.block_inputs_at == BlockInputsAt::kNvme && !cfg.keep_activations) {  // each layer's input, each micro-batch
    const auto inputs = static_cast<uint64_t>(RankMicroBatchTokens(cfg) * cfg.model.d_model * cfg.grad_accum *
                                              cfg.model.n_layer) * plan.dsize;
    t.written += inputs;
    t.read_at_most += inputs;
    t.read_served += inputs;
    t.read_all_experts += inputs;
  }
  return t;
}

LinkTraffic EstimateLinkTraffic(const SettledConfig& cfg, const ShardPlan& plan) {
  return EstimateLinkTraffic(cfg, plan, TokensPerVisit(cfg, plan));
}

LinkTraffic EstimateLinkTraffic(const SettledConfig& cfg, const ShardPlan& plan, int64_t tokens_per_visit) {
  LinkTraffic t;
  if (plan.host_device || plan.blocks.empty()) return t;
  // Every gather of a block that is not resident copies its shard (or, unsharded, its whole
  // group) in (Gatherer::Issue), once per visit of the engine's own plan; of a sparse layer's
  // block read whole, its routed experts only.
  const double share = ShareAt(cfg, tokens_per_visit);
  double unread = 0;
  for (const Visit& v : plan.Visits(static_cast<int>(BlockPasses(cfg)), /*backward=*/true)) {
    if (plan.resident[v.block]) continue;
    const ShardLayout& l = plan.blocks[v.block].layout;
    const ElementRange copied = plan.weights_sharded ? ElementRange{l.begin(), l.shard} : ElementRange{0, l.padded};
    t.in += static_cast<uint64_t>(copied.len) * plan.dsize;
    if (plan.FetchesRouted(v.block))
      unread += (1 - share) * static_cast<double>(ExpertBytesIn(plan, v.block, copied));
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
  t.in_all_experts = t.in;
  t.in -= static_cast<uint64_t>(std::llround(unread));
  return t;
}

}  // namespace strata
