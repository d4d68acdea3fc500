// Scalar AdamW and gradient pass: plain x86-64 (no -m flags), the fallback and the path
// every SIMD one is tested against. See adam_impl.h for the shared kernel templates.
#include "adam_impl.h"

namespace strata::cpu {

using Scalar = ScalarOps</*kHardwareFma=*/false>;

void AdamRangeScalar(const AdamArgs& a, size_t begin, size_t end) {
  AdamRangeDispatch<Scalar, Scalar>(a, begin, end);
}

double SumSquaresScalar(const float* x, size_t begin, size_t end) {
  return SumSquaresT<Scalar, Scalar>(x, begin, end);
}

double SumSquaresBf16Scalar(const uint16_t* x, size_t begin, size_t end) {
  return SumSquaresT<Scalar, Scalar>(x, begin, end);
}

}  // namespace strata::cpu
