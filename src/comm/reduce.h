// Element-wise reduction helpers shared by the communicators (Note [fp32 accumulation]).
// Folder-private: used by src/comm and its tests only.
//
// Note [fp32 accumulation]
// A reduction's partial results are always fp32, whatever the dtype of the buffers: bf16 and
// fp16 inputs are widened, summed in fp32 along the ring, and rounded once, with
// round-to-nearest-even, when the final value is stored. Summing in bf16 would round at every
// hop, so a gradient's error would grow with the rank count and its bits would depend on
// where the ring starts; with one rounding at the end, every rank count gives the sum of the
// same fp32 partials in the same order (Note [Ring order makes reductions deterministic]).
#pragma once

#include <cstddef>

#include "strata/communicator.h"
#include "strata/dtype.h"

namespace strata::comm {

// dst[i] = src[i] widened to fp32.                        src: n elements of `dtype`.
void LoadF32(const void* src, DType dtype, size_t n, float* dst);
// acc[i] = op(acc[i], src[i]): the incoming partial on the left, this rank's value on the
// right, so the order of operands is fixed by the caller's order of calls.
void Accumulate(float* acc, const void* src, DType dtype, size_t n, ReduceOp op);
// out[i] = op over sources 0, 1, .. n-1 (that order) of source(k)[i], in fp32 partials a block
// at a time, rounded once. source(k): the first byte of source k's `count` elements.
template <typename Source>
void ReduceInOrder(const Source& source, size_t n, DType dtype, size_t count, ReduceOp op, void* out);
// dst[i] = acc[i] rounded to `dtype` (RNE).                dst: n elements of `dtype`.
void StoreF32(const float* acc, DType dtype, size_t n, void* dst);

template <typename Source>
void ReduceInOrder(const Source& source, size_t n, DType dtype, size_t count, ReduceOp op, void* out) {
  constexpr size_t kBlock = 4096;  // fp32 partials stay in L1/L2
  float acc[kBlock];
  const size_t esize = DTypeSize(dtype);
  for (size_t i = 0; i < count; i += kBlock) {
    const size_t m = count - i < kBlock ? count - i : kBlock;
    LoadF32(static_cast<const char*>(source(0)) + i * esize, dtype, m, acc);
    for (size_t k = 1; k < n; ++k) Accumulate(acc, static_cast<const char*>(source(k)) + i * esize, dtype, m, op);
    StoreF32(acc, dtype, m, static_cast<char*>(out) + i * esize);
  }
}

}  // namespace strata::comm
