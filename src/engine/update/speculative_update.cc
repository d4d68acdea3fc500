// Note [Speculative update]: with strata.optimizer_overlap "speculative", during the last
// micro-batch of a step each block the plan chose (ShardPlan::speculative: from the last block
// down, while the backups fit) is updated on the optimizer thread as soon as its gradient is
// final, while the backward of the blocks below it goes on. The update assumes what holds for
// most steps: finite gradients and no clipping (a clip coefficient of exactly 1); the learning
// rate, Adam's step and the loss scale are known before the step starts. Before it updates a
// sub-group it copies the sub-group's master, m and v into the block's backup (host memory,
// counted by the plan), and it writes the updated working weights into the backup too, not to
// their home, which the next forward reads. Once the global norm is known (after the backward)
// the step's update concludes each speculated block, in block order:
//   stands     its working weights go home (a copy of 2 or 4 B/param); gradients zeroed
//   redo       (the step clips) master, m, v restored from the backup and updated again with
//              the clip coefficient, exactly as the plain schedule does
//   roll back  (an overflow, or the step failed) master, m, v restored; nothing else changed
// So every step leaves bitwise the plain schedule's state. Cost: (12 + working dtype size) B of
// host memory per speculated parameter, one copy of the states per step, and on a step that
// clips the speculated blocks' update done twice (StepStats::redone_blocks says how many).
#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "src/engine/update/update_mode.h"
#include "strata/check.h"

namespace strata {
namespace {

class SpeculativeUpdate final : public UpdateMode {
 public:
  explicit SpeculativeUpdate(const UpdateModeParts& m) : m_(m), window_(m.window) {}
  ~SpeculativeUpdate() override { DropStatesAhead(); }

  Status Allocate() override;
  bool ReadsStatesEarly() const override { return false; }  // the update reads its own, from the last block
  void BeginLastMicroBatch(int64_t) override {
    hp_ = m_.next_hyper_params();
    hp_.clip_coef = 1.0;
  }
  void GradientFinal(int b, const Event& added) override;
  Status Abandon() override;
  int EarlyBlocks() const override {
    return static_cast<int>(std::count_if(done_.begin(), done_.end(), [](const auto& d) { return d.has_value(); }));
  }
  std::function<Status(UpdateJob&)> Launch(int64_t step, const AdamHyperParams& hp) override;

 private:
  Status Update(int b, const AdamHyperParams& hp);  // optimizer thread
  // What `verdict` says of block b's speculative update (`updated`).
  Status Conclude(int b, Verdict verdict, const AdamHyperParams& hp, const Event& updated);
  // Sub-group `sg` of block b as it was before its speculative update: back in the cpu tier
  // (returns null), or in optim-pool buffers (NVMe states).
  StatusOr<std::unique_ptr<LoadedStates>> RestoreStates(int b, const SubGroup& sg);
  void DropStatesAhead();
  // Block b's backup: [master | m | v | updated working weights] over its optimizer range;
  // part k at element `at` of that range.
  std::byte* BackupOf(int b, int k, int64_t at);

  UpdateModeParts m_;
  UpdateWindow& window_;
  HostArrays memory_;
  std::vector<std::byte*> backup_;  // per block: plan.SpeculationBackupBytes(b), or null (not speculated)
  AdamHyperParams hp_;              // what the updates assume: this step's, with no clipping
  // Per block: its speculative update this step (its event carries the update's Status), if any.
  std::vector<std::optional<Event>> done_;
  // Optimizer thread: the states of the next block to be speculated (the one below), read
  // from NVMe while its backward still runs.
  std::unique_ptr<LoadedStates> ahead_;
};

std::byte* SpeculativeUpdate::BackupOf(int b, int k, int64_t at) {
  const StateFormat& format = m_.plan.format;
  const int64_t len = m_.plan.blocks[b].optimizer.len;
  int64_t offset = 0;
  for (int i = 0; i < k; ++i) offset += format.StoredStateBytes(i, len);
  return backup_[b] + offset + (k < 3 ? format.StoredStateBytes(k, at) : at * m_.plan.dsize);
}

Status SpeculativeUpdate::Allocate() {
  const int n = m_.num_blocks();
  done_.assign(n, std::nullopt);
  backup_.assign(n, nullptr);
  for (int b = 0; b < n; ++b) {
    const uint64_t bytes = m_.plan.speculative[b] ? m_.plan.SpeculationBackupBytes(b) : 0;
    if (bytes == 0) continue;
    STRATA_ASSIGN_OR_RETURN(backup_[b], memory_.Allocate(bytes));
    m_.ledger.Add(StateKind::kSpeculationBackup, Tier::kCpu, bytes);
  }
  return Status();
}

void SpeculativeUpdate::GradientFinal(int b, const Event& added) {
  if (!backup_[b]) return;  // only speculated blocks have a backup
  // The hyper-parameters go by value: the next step re-arms while this update may still run.
  done_[b] = m_.thread.Submit(
      {{added}, nullptr, [this, b, hp = hp_] { return Update(b, hp); }, "speculative update b" + std::to_string(b), 0, {}});
}

std::function<Status(UpdateJob&)> SpeculativeUpdate::Launch(int64_t, const AdamHyperParams& hp) {
  // This step's speculative updates go with it: the next step re-arms while it may still run.
  auto speculated = std::exchange(done_, std::vector<std::optional<Event>>(m_.num_blocks()));
  if (std::any_of(speculated.begin(), speculated.end(), [](const auto& d) { return d.has_value(); }))
    STRATA_CHECK(hp_.lr == hp.lr && hp_.step == hp.step && hp_.grad_unscale == hp.grad_unscale)
        << "the speculative updates assumed another step";
  return [this, speculated](UpdateJob& job) -> Status {
    DropStatesAhead();  // read for a block that was not speculated after all (not expected)
    // In block order: a speculated block concludes; the others between them are updated as one pipeline.
    std::vector<int> pending;
    Status s;
    for (int b = 0; b <= m_.num_blocks() && s.ok(); ++b) {
      const bool concluding = b < m_.num_blocks() && speculated[b].has_value();
      if (b < m_.num_blocks() && !concluding) {
        pending.push_back(b);
        continue;
      }
      if (!pending.empty()) s = window_.UpdateBlocks(job.hp, pending, job.early, job.ready);
      pending.clear();
      if (s.ok() && concluding) {
        s = Conclude(b, job.verdict, job.hp, *speculated[b]);
        if (s.ok()) job.ready[b]->Set(Status());
      }
    }
    DropStates(job.early);  // not consumed (not expected)
    return s;
  };
}

// Block b's sub-groups, pipelined as in UpdateBlocks; each backed up before it is updated,
// its working weights into the backup. With the states on NVMe, the first sub-group of the
// block below (speculated next) is read while this block's last one is updated.
Status SpeculativeUpdate::Update(int b, const AdamHyperParams& hp) {
  const BlockPlan& bp = m_.plan.blocks[b];
  const std::vector<SubGroup>& subs = m_.model.blocks[b].subs;
  const bool states_nvme = m_.state.pools.optim != nullptr;
  auto load = [&](const SubGroup& sg) {
    return ahead_ && ahead_->sub == &sg ? std::move(ahead_) : window_.LoadStates(sg);
  };
  if (ahead_ && (subs.empty() || ahead_->sub != &subs[0])) DropStatesAhead();  // not expected
  std::unique_ptr<LoadedStates> next;
  if (states_nvme && !subs.empty()) next = load(subs[0]);
  for (size_t i = 0; i < subs.size(); ++i) {
    const SubGroup& sg = subs[i];
    std::unique_ptr<LoadedStates> cur = std::move(next);
    if (states_nvme && i + 1 < subs.size()) next = window_.LoadStates(subs[i + 1]);
    if (states_nvme && i + 1 == subs.size() && b > 0 && backup_[b - 1] && !m_.model.blocks[b - 1].subs.empty())
      ahead_ = window_.LoadStates(m_.model.blocks[b - 1].subs[0]);
    const int64_t at = sg.range.begin - bp.optimizer.begin;
    STRATA_ASSIGN_OR_RETURN(auto states, window_.StateSpans(b, sg, cur.get()));
    {
      Tracer::Span s(m_.tracer, Track::kOptimizer, "backup b" + std::to_string(b));
      for (int k = 0; k < 3; ++k)
        if (!states[k].empty()) std::memcpy(BackupOf(b, k, at), states[k].data(), states[k].size());
    }
    STRATA_RETURN_IF_ERROR(window_.UpdateSubGroup(hp, b, sg, cur.get(), BackupOf(b, 3, at)));
  }
  return Status();
}

StatusOr<std::unique_ptr<LoadedStates>> SpeculativeUpdate::RestoreStates(int b, const SubGroup& sg) {
  const StateFormat& format = m_.plan.format;
  const int64_t at = sg.range.begin - m_.plan.blocks[b].optimizer.begin;
  if (m_.state.store->home(sg.moment()) != Tier::kNvme) {
    const TensorHandle hs[3] = {sg.master, sg.m, sg.v};
    for (int k = 0; k < 3; ++k)
      if (format.StoresState(k))
        std::memcpy(m_.state.store->CpuMemory(hs[k]).data(), BackupOf(b, k, at), format.StoredStateBytes(k, sg.range.len));
    return std::unique_ptr<LoadedStates>();
  }
  std::unique_ptr<LoadedStates> l = window_.LeaseStates(sg);
  for (int k = 0; k < 3; ++k)
    if (format.StoresState(k)) std::memcpy(l->buf[k].data(), BackupOf(b, k, at), format.StoredStateBytes(k, sg.range.len));
  return l;
}

Status SpeculativeUpdate::Conclude(int b, Verdict verdict, const AdamHyperParams& hp, const Event& updated) {
  STRATA_RETURN_IF_ERROR(updated.Wait().WithContext(fmt::format("the speculative update of block {}", b)));
  const BlockPlan& bp = m_.plan.blocks[b];
  const std::vector<SubGroup>& subs = m_.model.blocks[b].subs;
  if (verdict == Verdict::kRollBack) {
    for (const SubGroup& sg : subs) {
      STRATA_ASSIGN_OR_RETURN(std::unique_ptr<LoadedStates> l, RestoreStates(b, sg));
      if (!l) continue;  // restored in place
      const TensorHandle hs[3] = {sg.master, sg.m, sg.v};
      for (int k = 0; k < 3; ++k)
        if (m_.plan.format.StoresState(k)) (void)m_.state.store->WriteBack(hs[k], std::move(l->buf[k]));
    }
    return Status();
  }
  PinnedBuffer lease;
  int64_t first = 0;
  STRATA_ASSIGN_OR_RETURN(std::byte * out, window_.BlockOutput(b, &lease, &first));
  out += (bp.optimizer.begin - first) * m_.plan.dsize;  // this rank's updated part
  if (verdict == Verdict::kStands) {
    Tracer::Span s(m_.tracer, Track::kOptimizer, "speculation stands b" + std::to_string(b));
    std::memcpy(out, BackupOf(b, 3, 0), bp.optimizer.len * m_.plan.dsize);
  } else {
    for (const SubGroup& sg : subs) {
      STRATA_ASSIGN_OR_RETURN(std::unique_ptr<LoadedStates> l, RestoreStates(b, sg));
      std::byte* sg_out = out + (sg.range.begin - bp.optimizer.begin) * m_.plan.dsize;
      STRATA_RETURN_IF_ERROR(window_.UpdateSubGroup(hp, b, sg, l.get(), sg_out));
    }
  }
  return window_.FinishBlock(b, std::move(lease));
}

void SpeculativeUpdate::DropStatesAhead() {
  if (!ahead_) return;
  for (Event& t : ahead_->read) t.Wait().IgnoreError();  // the buffers are being written into
  ahead_.reset();
}

Status SpeculativeUpdate::Abandon() {
  auto done = std::exchange(done_, std::vector<std::optional<Event>>(m_.num_blocks()));
  if (std::none_of(done.begin(), done.end(), [](const auto& d) { return d.has_value(); })) return Status();
  const Event rolled_back = m_.thread.Submit({{}, nullptr, [this, done] {
                                                           Status first;
                                                           DropStatesAhead();
                                                           for (int b = 0; b < m_.num_blocks(); ++b) {
                                                             if (!done[b]) continue;
                                                             Status s = Conclude(b, Verdict::kRollBack, {}, *done[b]);
                                                             if (first.ok()) first = s;
                                                           }
                                                           return first;
                                                         },
                                                         "roll back speculation", 0, {}});
  return rolled_back.Wait().WithContext("rolling back the speculative updates");
}

}  // namespace

std::unique_ptr<UpdateMode> MakeSpeculativeUpdate(const UpdateModeParts& m) { return std::make_unique<SpeculativeUpdate>(m); }

}  // namespace strata
