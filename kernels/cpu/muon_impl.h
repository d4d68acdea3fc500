// Folder-private: Muon's direction pass (MuonNesterov in strata/cpu_adam.h), a template over the
// ISA ops of adam_impl.h that each ISA file instantiates. It reads g and m, computes the new
// momentum and Nesterov's direction with the update's own MuonMomentum, and writes only the
// direction: the update recomputes the momentum, bit for bit the same.
#pragma once

#include "adam_impl.h"

namespace strata::cpu {
namespace {

template <class Ops, GradKind kGrad>
inline void MuonNesterovLoop(const AdamArgs& a, size_t begin, size_t end, float* out) {
  using F = typename Ops::F;
  const AdamConsts<Ops> c(a);
  for (size_t i = begin; i < end; i += Ops::kWidth) {
    const F g = LoadGradient<Ops, kGrad>(a, i);
    const F gs = Ops::Mul(g, c.grad_scale);
    const F m = MuonMomentum<Ops>(c, gs, Ops::Load(a.m + i));
    Ops::Store(out + i, MuonDirection<Ops>(c, gs, m));
  }
}

// The vector body, then one element at a time.
template <class Wide, class Narrow>
inline void MuonNesterovDispatch(const AdamArgs& a, size_t begin, size_t end, float* out) {
  const size_t body_end = begin + (end - begin) / Wide::kWidth * Wide::kWidth;
  if (a.grad_kind == GradKind::kBf16) {
    MuonNesterovLoop<Wide, GradKind::kBf16>(a, begin, body_end, out);
    return MuonNesterovLoop<Narrow, GradKind::kBf16>(a, body_end, end, out);
  }
  MuonNesterovLoop<Wide, GradKind::kFp32>(a, begin, body_end, out);
  MuonNesterovLoop<Narrow, GradKind::kFp32>(a, body_end, end, out);
}

}  // namespace
}  // namespace strata::cpu
