// Element-wise reduction helpers shared by the communicators. Partial results are always
// fp32 (Note [fp32 accumulation]): bf16/fp16 inputs are widened, summed in fp32 and rounded
// once, with round-to-nearest-even, when the final value is stored.
// Folder-private: used by src/comm and its tests only.
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
// dst[i] = acc[i] rounded to `dtype` (RNE).                dst: n elements of `dtype`.
void StoreF32(const float* acc, DType dtype, size_t n, void* dst);

}  // namespace strata::comm
