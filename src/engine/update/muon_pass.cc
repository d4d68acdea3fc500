// Muon's two halves in the update window (Note [Muon] in update/muon_matrices.h): the pass
// that gives the orthogonalisation its input, u over this rank's pieces of a block's matrices
// (states read, nothing written), and the update of a sub-group piece by piece, a matrix's
// with its o, the rest with AdamW. The engine assembles the matrices across ranks and
// orthogonalises them in between (engine_optimizer.cc).
#include <algorithm>
#include <utility>

#include "src/engine/update/update_window.h"
#include "strata/check.h"

namespace strata {

void UpdateWindow::SetMuonTensors(std::vector<MuonTensors> tensors) {
  muon_ = std::move(tensors);
  muon_o_.assign(m_.plan.blocks.size(), {});
  int64_t widest = 0;
  for (size_t b = 0; b < m_.plan.blocks.size(); ++b) {
    muon_o_[b].assign(static_cast<size_t>(m_.plan.blocks[b].optimizer.len), 0.0f);
    widest = std::max(widest, m_.plan.blocks[b].layout.padded);
  }
  muon_u_.assign(static_cast<size_t>(widest), 0.0f);
}

uint64_t UpdateWindow::MuonBytes() const {
  uint64_t elements = muon_u_.size();
  for (const std::vector<float>& o : muon_o_) elements += o.size();
  return elements * sizeof(float);
}

StatusOr<std::span<float>> UpdateWindow::MuonDirections(int b) {
  Tracer::Span span(m_.io.tracer, Track::kOptimizer, "muon directions b" + std::to_string(b));
  DropEarlyStates();
  STRATA_CHECK(b < static_cast<int>(muon_.size())) << "Muon's directions before the blocks' matrices";
  const std::span<float> u = std::span<float>(muon_u_).first(static_cast<size_t>(m_.plan.blocks[b].layout.padded));
  std::fill(u.begin(), u.end(), 0.0f);
  std::vector<std::pair<int, const SubGroup*>> order;
  for (const SubGroup& sg : m_.model.blocks[b].subs) order.push_back({b, &sg});
  const MuonTensors& tensors = muon_[b];
  STRATA_RETURN_IF_ERROR(VisitStates(order, [&](int, const SubGroup& sg, LoadedStates* cur) -> Status {
    STRATA_ASSIGN_OR_RETURN(auto states, StateSpans(b, sg, cur));
    AdamSpans spans;
    const BlockRuntime& br = m_.model.blocks[b];
    if (m_.plan.gsize == 2) spans.grad_bf16 = AccumulatedGradient<uint16_t>(br, m_.plan.blocks[b], sg.range);
    else spans.grad = AccumulatedGradient<float>(br, m_.plan.blocks[b], sg.range);
    spans.exp_avg = {reinterpret_cast<float*>(states[1].data()), static_cast<size_t>(sg.range.len)};  // (fp32: Note [Optimizer rules])
    Status status;
    ForEachTensorPiece(tensors.ranges, sg.range, [&](int t, int64_t lo, int64_t hi) {
      if (!status.ok() || t < 0 || tensors.matrix[t] < 0) return;
      const size_t at = static_cast<size_t>(lo), n = static_cast<size_t>(hi - lo);
      AdamSpans piece;
      piece.exp_avg = spans.exp_avg.subspan(at, n);
      if (!spans.grad.empty()) piece.grad = spans.grad.subspan(at, n);
      else piece.grad_bf16 = spans.grad_bf16.subspan(at, n);
      status = MuonNesterov(muon_hp_, piece, u.subspan(sg.range.begin + lo, hi - lo), {.num_threads = threads_});
    });
    return status;
  }));
  return u;
}

Status UpdateWindow::StepMuon(const AdamHyperParams& hp, int b, const SubGroup& sg, const AdamSpans& spans) {
  STRATA_CHECK(b < static_cast<int>(muon_.size())) << "Muon update of block " << b << " before its matrices";
  const MuonTensors& tensors = muon_[b];
  const std::span<const float> o = std::span<const float>(muon_o_[b]).subspan(
      static_cast<size_t>(sg.range.begin - m_.plan.blocks[b].optimizer.begin), static_cast<size_t>(sg.range.len));
  AdamHyperParams adam = hp;
  adam.rule = UpdateRule::kAdam;
  AdamHyperParams muon = muon_hp_;  // (as the direction pass took them: its momentum is the one stored)
  std::vector<std::pair<size_t, size_t>> no_decay;
  Status status;
  ForEachTensorPiece(tensors.ranges, sg.range, [&](int t, int64_t lo, int64_t hi) {
    if (!status.ok()) return;
    AdamSpans piece = SliceSpans(spans, lo, hi, &no_decay);
    const int matrix = t >= 0 ? tensors.matrix[t] : -1;
    if (matrix < 0) {  // AdamW's half (padding too: p, g and the moments are 0 and stay so)
      status = AdamStep(adam, piece, {.num_threads = threads_});
      return;
    }
    muon.muon_lr_ratio = tensors.matrices[matrix].lr_ratio;
    piece.exp_avg_sq = {};  // (a matrix's stays 0)
    piece.muon_update = o.subspan(static_cast<size_t>(lo), static_cast<size_t>(hi - lo));
    status = AdamStep(muon, piece, {.num_threads = threads_});
  });
  return status;
}

}  // namespace strata
