// Note [Speculative update]: with strata.optimizer_overlap "speculative", during the last
// micro-batch of a step each block the plan chose (ShardPlan::speculative: from the last block
// down, while the backups fit) is updated on the optimizer thread as soon as its gradient is
// final, while the backward of the blocks below it goes on. The update assumes what holds for
// most steps: finite gradients and no clipping (a clip coefficient of exactly 1); the learning
// rate, Adam's step and the loss scale are known before the step starts. Before it updates a
// sub-group it copies the sub-group's master, m and v into the block's backup (host memory,
// counted by the plan), and it writes the updated working weights into the backup too, not to
// their home, which the next forward reads. Once the global norm is known (after the backward)
// FinishStep concludes each speculated block, in block order:
//   stands     its working weights go home (a copy of 2 or 4 B/param); gradients zeroed
//   redo       (the step clips) master, m, v restored from the backup and updated again with
//              the clip coefficient, exactly as the plain schedule does
//   roll back  (an overflow, or the step failed) master, m, v restored; nothing else changed
// So every step leaves bitwise the plain schedule's state. Cost: (12 + working dtype size) B of
// host memory per speculated parameter, one copy of the states per step, and on a step that
// clips the speculated blocks' update done twice (StepStats::redone_blocks says how many).
#include <algorithm>
#include <cstring>
#include <utility>

#include "src/engine/engine_impl.h"

namespace strata {

// Block b's backup: [master | m | v | updated working weights] over its optimizer range;
// part k at element `at` of that range.
std::byte* Engine::Impl::BackupOf(int b, int k, int64_t at) {
  const int64_t len = plan.blocks[b].optimizer.len;
  int64_t offset = 0;
  for (int i = 0; i < k; ++i) offset += StateBytes(i, len);
  return speculation.backup[b] + offset + (k < 3 ? StateBytes(k, at) : at * plan.dsize);
}

Status Engine::Impl::AllocateSpeculation() {
  speculation.done.assign(num_blocks(), std::nullopt);
  speculation.backup.assign(num_blocks(), nullptr);
  for (int b = 0; b < num_blocks(); ++b) {
    const uint64_t bytes = plan.speculative[b] ? plan.SpeculationBackupBytes(b) : 0;
    if (bytes == 0) continue;
    STRATA_ASSIGN_OR_RETURN(speculation.backup[b], speculation.memory.Allocate(bytes));
    ledger.Add(StateKind::kSpeculationBackup, Residence::kCpu, bytes);
  }
  return Status();
}

void Engine::Impl::ArmSpeculation(int64_t step) {
  if (cfg.optimizer_overlap != OptimizerOverlap::kSpeculative) return;
  speculation.hp = NextHyperParams(step);
  speculation.hp.clip_coef = 1.0;
}

void Engine::Impl::Speculate(int b, const Event& grad_final) {
  // Only in the last micro-batch is a reduced gradient final; only speculated blocks have a backup.
  if (!last_micro_batch || !speculation.backup[b]) return;
  // The hyper-parameters go by value: the next step re-arms while this update may still run.
  speculation.done[b] = optimizer.thread->Submit(
      {{grad_final}, nullptr, [this, b, hp = speculation.hp] { return SpeculativeUpdate(b, hp); },
       "speculative update b" + std::to_string(b), 0, {}});
}

// Block b's sub-groups, pipelined as in UpdateBlocks; each backed up before it is updated,
// its working weights into the backup. With the states on NVMe, the first sub-group of the
// block below (speculated next) is read while this block's last one is updated.
Status Engine::Impl::SpeculativeUpdate(int b, const AdamHyperParams& hp) {
  const BlockPlan& bp = plan.blocks[b];
  const std::vector<SubGroup>& subs = model.blocks[b].subs;
  const bool states_nvme = pools.optim != nullptr;
  auto load = [&](const SubGroup& sg) {
    return speculation.ahead && speculation.ahead->sub == &sg ? std::move(speculation.ahead) : LoadStates(sg);
  };
  if (speculation.ahead && (subs.empty() || speculation.ahead->sub != &subs[0])) DropStatesAhead();  // not expected
  std::unique_ptr<LoadedStates> next;
  if (states_nvme && !subs.empty()) next = load(subs[0]);
  for (size_t i = 0; i < subs.size(); ++i) {
    const SubGroup& sg = subs[i];
    std::unique_ptr<LoadedStates> cur = std::move(next);
    if (states_nvme && i + 1 < subs.size()) next = LoadStates(subs[i + 1]);
    if (states_nvme && i + 1 == subs.size() && b > 0 && speculation.backup[b - 1] && !model.blocks[b - 1].subs.empty())
      speculation.ahead = LoadStates(model.blocks[b - 1].subs[0]);
    const int64_t at = sg.range.begin - bp.optimizer.begin;
    STRATA_ASSIGN_OR_RETURN(auto states, StateSpans(b, sg, cur.get()));
    {
      Tracer::Span s(tracer, Track::kOptimizer, "backup b" + std::to_string(b));
      for (int k = 0; k < 3; ++k) std::memcpy(BackupOf(b, k, at), states[k].data(), states[k].size());
    }
    STRATA_RETURN_IF_ERROR(UpdateSubGroup(hp, b, sg, cur.get(), BackupOf(b, 3, at)));
  }
  return Status();
}

StatusOr<std::unique_ptr<LoadedStates>> Engine::Impl::RestoreStates(int b, const SubGroup& sg) {
  const int64_t at = sg.range.begin - plan.blocks[b].optimizer.begin;
  if (store->home(sg.master) != Tier::kNvme) {
    const TensorHandle hs[3] = {sg.master, sg.m, sg.v};
    for (int k = 0; k < 3; ++k) std::memcpy(store->CpuMemory(hs[k]).data(), BackupOf(b, k, at), StateBytes(k, sg.range.len));
    return std::unique_ptr<LoadedStates>();
  }
  std::unique_ptr<LoadedStates> l = LeaseStates(sg);
  for (int k = 0; k < 3; ++k) std::memcpy(l->buf[k].data(), BackupOf(b, k, at), StateBytes(k, sg.range.len));
  return l;
}

Status Engine::Impl::Conclude(int b, Verdict verdict, const AdamHyperParams& hp, const Event& updated) {
  STRATA_RETURN_IF_ERROR(updated.Wait().WithContext(fmt::format("the speculative update of block {}", b)));
  const BlockPlan& bp = plan.blocks[b];
  const std::vector<SubGroup>& subs = model.blocks[b].subs;
  if (verdict == Verdict::kRollBack) {
    for (const SubGroup& sg : subs) {
      STRATA_ASSIGN_OR_RETURN(std::unique_ptr<LoadedStates> l, RestoreStates(b, sg));
      if (!l) continue;  // restored in place
      const TensorHandle hs[3] = {sg.master, sg.m, sg.v};
      for (int k = 0; k < 3; ++k) (void)store->WriteBack(hs[k], std::move(l->buf[k]));
    }
    return Status();
  }
  PinnedBuffer lease;
  int64_t first = 0;
  STRATA_ASSIGN_OR_RETURN(std::byte * out, BlockOutput(b, &lease, &first));
  out += (bp.optimizer.begin - first) * plan.dsize;  // this rank's updated part
  if (verdict == Verdict::kStands) {
    Tracer::Span s(tracer, Track::kOptimizer, "speculation stands b" + std::to_string(b));
    std::memcpy(out, BackupOf(b, 3, 0), bp.optimizer.len * plan.dsize);
  } else {
    for (const SubGroup& sg : subs) {
      STRATA_ASSIGN_OR_RETURN(std::unique_ptr<LoadedStates> l, RestoreStates(b, sg));
      std::byte* sg_out = out + (sg.range.begin - bp.optimizer.begin) * plan.dsize;
      STRATA_RETURN_IF_ERROR(UpdateSubGroup(hp, b, sg, l.get(), sg_out));
    }
  }
  return FinishBlock(b, std::move(lease));
}

void Engine::Impl::DropStatesAhead() {
  if (!speculation.ahead) return;
  for (Event& t : speculation.ahead->read) t.Wait().IgnoreError();  // the buffers are being written into
  speculation.ahead.reset();
}

Status Engine::Impl::AbandonSpeculation() {
  auto done = std::exchange(speculation.done, std::vector<std::optional<Event>>(num_blocks()));
  if (std::none_of(done.begin(), done.end(), [](const auto& d) { return d.has_value(); })) return Status();
  const Event rolled_back = optimizer.thread->Submit({{}, nullptr, [this, done] {
                                                              Status first;
                                                              DropStatesAhead();
                                                              for (int b = 0; b < num_blocks(); ++b) {
                                                                if (!done[b]) continue;
                                                                Status s = Conclude(b, Verdict::kRollBack, {}, *done[b]);
                                                                if (first.ok()) first = s;
                                                              }
                                                              return first;
                                                            },
                                                            "roll back speculation", 0, {}});
  return rolled_back.Wait().WithContext("rolling back the speculative updates");
}

}  // namespace strata
