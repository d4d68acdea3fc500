// Scalar AdamW and gradient pass: plain x86-64 (no -m flags), the fallback and the path
// every SIMD one is tested against. See adam_impl.h for the shared kernel templates.
#include "adam_impl.h"
#include "lamb_impl.h"
#include "muon_impl.h"

namespace strata::cpu {

using Scalar = ScalarOps</*kHardwareFma=*/false>;

void AdamRangeScalar(const AdamArgs& a, size_t begin, size_t end) {
  AdamRangeDispatch<Scalar, Scalar>(a, begin, end);
}

void LambSumsScalar(const AdamArgs& a, size_t begin, size_t end, double* w, double* u) {
  LambSumsDispatch<Scalar, Scalar>(a, begin, end, w, u);
}

void MuonNesterovScalar(const AdamArgs& a, size_t begin, size_t end, float* out) {
  MuonNesterovDispatch<Scalar, Scalar>(a, begin, end, out);
}

double SumSquaresScalar(const float* x, size_t begin, size_t end) {
  return SumSquaresT<Scalar, Scalar>(x, begin, end);
}

double SumSquaresBf16Scalar(const uint16_t* x, size_t begin, size_t end) {
  return SumSquaresT<Scalar, Scalar>(x, begin, end);
}

// Fused as on the SIMD paths (std::fma; a library call without -mfma), so that a gradient
// accumulates to the same bits on every ISA (Note [Gradient accumulation]).
using FusedScalar = ScalarOps</*kHardwareFma=*/true>;

void AccumulateScalar(float* acc, const float* part, float scale, bool overwrite, size_t begin, size_t end) {
  AccumulateT<FusedScalar, FusedScalar>(acc, part, scale, overwrite, begin, end);
}

void AccumulateScalar(uint16_t* acc, const float* part, float scale, bool overwrite, size_t begin, size_t end) {
  AccumulateT<FusedScalar, FusedScalar>(acc, part, scale, overwrite, begin, end);
}

void AccumulateScalar(float* acc, const uint16_t* part, float scale, bool overwrite, size_t begin, size_t end) {
  AccumulateT<FusedScalar, FusedScalar>(acc, part, scale, overwrite, begin, end);
}

void AccumulateScalar(uint16_t* acc, const uint16_t* part, float scale, bool overwrite, size_t begin, size_t end) {
  AccumulateT<FusedScalar, FusedScalar>(acc, part, scale, overwrite, begin, end);
}

void SplitMasterScalar(const float* p, uint16_t* w, int16_t* lo, size_t n) {
  SplitMasterT<Scalar, Scalar>(p, w, lo, n);
}

void JoinMasterScalar(const uint16_t* w, const int16_t* lo, float* p, size_t n) {
  JoinMasterT<Scalar, Scalar>(w, lo, p, n);
}

}  // namespace strata::cpu
