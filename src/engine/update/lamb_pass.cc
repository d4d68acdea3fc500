// LAMB's two halves in the update window (Note [LAMB trust ratio] in strata/cpu_adam.h): the
// norm pass, which reads every sub-group's states as the update will and writes nothing, and
// the update of a sub-group tensor piece by tensor piece with each tensor's trust ratio. The
// engine adds the norm pass's sums across ranks and sets the ratios in between
// (engine_optimizer.cc).
#include <algorithm>
#include <utility>

#include "src/engine/update/update_window.h"
#include "strata/check.h"

namespace strata {

std::optional<AdamHyperParams> UpdateWindow::SubGroupParams(const AdamHyperParams& hp, int b, const SubGroup& sg) const {
  AdamHyperParams own = hp;
  if (const int e = m_.plan.blocks[b].ExpertAt(sg.range.begin); e >= 0 && m_.experts.UpdateStep(b, e) >= 0) {
    own.step = m_.experts.UpdateStep(b, e);  // Note [Expert updates]: strata.expert_update "chosen"
    if (own.step == 0) return std::nullopt;
  }
  return own;
}

Status UpdateWindow::StepTensors(const AdamHyperParams& hp, int b, const SubGroup& sg, const AdamSpans& spans) {
  STRATA_CHECK(b < static_cast<int>(trust_.size()) && b < static_cast<int>(groups_.size()))
      << "LAMB update of block " << b << " before its trust ratios";
  const std::vector<float>& ratios = trust_[b];
  const TensorGroups& groups = groups_[b];
  std::vector<std::pair<size_t, size_t>> no_decay;
  Status status;
  ForEachTensorPiece(groups.ranges, sg.range, [&](int t, int64_t lo, int64_t hi) {
    if (!status.ok()) return;
    AdamHyperParams piece = hp;
    piece.trust_ratio = t >= 0 ? ratios[groups.group[t]] : 1.0;  // padding: p, g and the moments are 0 and stay so
    status = AdamStep(piece, SliceSpans(spans, lo, hi, &no_decay), {.num_threads = threads_});
  });
  return status;
}

// Block b's working weights where the update reads the master from them; null where it does
// not (a master of its own: the norm pass reads that).
StatusOr<std::byte*> UpdateWindow::WorkingForNorms(int b, PinnedBuffer* lease, int64_t* first) {
  const BlockRuntime& br = m_.model.blocks[b];
  *first = m_.plan.blocks[b].working.begin;
  if (br.adapter.valid()) {
    *first = m_.plan.blocks[b].adapter.begin;
    return m_.state.store->CpuMemory(br.adapter).data();
  }
  if (!m_.plan.resident[b] && m_.state.store->home(br.working) != Tier::kNvme)
    return m_.state.store->CpuMemory(br.working).data();
  if (!m_.plan.format.MasterFromWorking()) return nullptr;
  STRATA_ASSIGN_OR_RETURN(*lease, LeaseParamBuffer());
  STRATA_RETURN_IF_ERROR(ReadWorkingInto(b, *lease).Wait().WithContext(fmt::format("working weights of block {}", b)));
  return lease->data();
}

Status UpdateWindow::AddNorms(const AdamHyperParams& hp, int b, const SubGroup& sg, LoadedStates* cur,
                              std::byte* working, std::vector<LambSums>* sums) {
  const std::optional<AdamHyperParams> own = SubGroupParams(hp, b, sg);
  if (!own) return Status();  // not updated this step: not in the norms either
  STRATA_ASSIGN_OR_RETURN(auto states, StateSpans(b, sg, cur));
  std::vector<std::pair<size_t, size_t>> no_decay;
  AdamSpans spans = SubGroupSpans(b, sg, states, working, own->step, &no_decay);  // (as the update's)
  if (!m_.plan.format.MasterFromWorking()) spans.half_out = {};  // written by the update, never read
  std::vector<std::pair<size_t, size_t>> piece_no_decay;
  const TensorGroups& groups = groups_[b];
  Status status;
  ForEachTensorPiece(groups.ranges, sg.range, [&](int t, int64_t lo, int64_t hi) {
    if (!status.ok() || t < 0) return;
    LambSums piece;
    status = LambNormSums(*own, SliceSpans(spans, lo, hi, &piece_no_decay), &piece, {.num_threads = threads_});
    LambSums& group = (*sums)[groups.group[t]];
    group.weight_sq += piece.weight_sq;
    group.update_sq += piece.update_sq;
  });
  return status;
}

// Every sub-group in update order, the next one's states read while one is summed.
StatusOr<std::vector<std::vector<LambSums>>> UpdateWindow::LambNorms(const AdamHyperParams& hp) {
  Tracer::Span span(m_.io.tracer, Track::kOptimizer, "lamb norms");
  DropEarlyStates();
  const int n = static_cast<int>(m_.model.blocks.size());
  std::vector<std::vector<LambSums>> sums(n);
  std::vector<std::pair<int, const SubGroup*>> order;
  STRATA_CHECK(static_cast<int>(groups_.size()) == n) << "LAMB's norm pass before the blocks' tensor groups";
  for (int b = 0; b < n; ++b) {
    sums[b].resize(groups_[b].count);
    for (const SubGroup& sg : m_.model.blocks[b].subs) order.push_back({b, &sg});
  }
  PinnedBuffer lease;
  std::byte* working = nullptr;
  int64_t first = 0;
  int working_of = -1;
  STRATA_RETURN_IF_ERROR(VisitStates(order, [&](int b, const SubGroup& sg, LoadedStates* cur) -> Status {
    if (b != working_of) {
      lease = PinnedBuffer();  // (the block before's, back to its pool)
      STRATA_ASSIGN_OR_RETURN(working, WorkingForNorms(b, &lease, &first));
      working_of = b;
    }
    std::byte* at = working ? working + (sg.range.begin - first) * m_.plan.dsize : nullptr;
    return AddNorms(hp, b, sg, cur, at, &sums[b]);
  }));
  return sums;
}

}  // namespace strata
