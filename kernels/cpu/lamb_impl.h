// Folder-private: LAMB's norm pass (Note [LAMB trust ratio] in strata/cpu_adam.h), a template
// over the ISA ops of adam_impl.h that each ISA file instantiates. It reads what the update
// reads (g, the master, m, v), computes u with LambDirection and writes nothing.
#pragma once

#include "adam_impl.h"

namespace strata::cpu {
namespace {

template <class Ops, GradKind kGrad, MasterKind kMaster>
inline void LambSumsLoop(const AdamArgs& a, size_t begin, size_t end, typename Ops::D& w, typename Ops::D& u) {
  using F = typename Ops::F;
  const AdamConsts<Ops> c(a);
  for (size_t i = begin; i < end; i += Ops::kWidth) {
    const F g = LoadGradient<Ops, kGrad>(a, i);
    F p;
    if constexpr (kMaster == MasterKind::kSplit) p = Ops::LoadSplit(a.half + i, a.lo + i);
    else p = Ops::Load(a.p + i);
    F m = Ops::Load(a.m + i), v = Ops::Load(a.v + i);
    const F direction = LambDirection<Ops>(c, g, p, m, v);
    Ops::AccumulateSquares(w, p);
    Ops::AccumulateSquares(u, direction);
  }
}

// The vector body, then one element at a time.
template <class Wide, class Narrow, GradKind kGrad, MasterKind kMaster>
inline void LambSumsRange(const AdamArgs& a, size_t begin, size_t end, double* w, double* u) {
  const size_t body_end = begin + (end - begin) / Wide::kWidth * Wide::kWidth;
  typename Wide::D wide_w = Wide::ZeroD(), wide_u = Wide::ZeroD();
  LambSumsLoop<Wide, kGrad, kMaster>(a, begin, body_end, wide_w, wide_u);
  typename Narrow::D tail_w = Narrow::ZeroD(), tail_u = Narrow::ZeroD();
  LambSumsLoop<Narrow, kGrad, kMaster>(a, body_end, end, tail_w, tail_u);
  *w += Wide::ReduceD(wide_w) + Narrow::ReduceD(tail_w);
  *u += Wide::ReduceD(wide_u) + Narrow::ReduceD(tail_u);
}

template <class Wide, class Narrow>
inline void LambSumsDispatch(const AdamArgs& a, size_t begin, size_t end, double* w, double* u) {
  const bool split = a.master_kind == MasterKind::kSplit;
  if (a.grad_kind == GradKind::kBf16)
    return split ? LambSumsRange<Wide, Narrow, GradKind::kBf16, MasterKind::kSplit>(a, begin, end, w, u)
                 : LambSumsRange<Wide, Narrow, GradKind::kBf16, MasterKind::kFp32>(a, begin, end, w, u);
  return split ? LambSumsRange<Wide, Narrow, GradKind::kFp32, MasterKind::kSplit>(a, begin, end, w, u)
               : LambSumsRange<Wide, Narrow, GradKind::kFp32, MasterKind::kFp32>(a, begin, end, w, u);
}

}  // namespace
}  // namespace strata::cpu
