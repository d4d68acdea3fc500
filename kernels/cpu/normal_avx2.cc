// FillNormal's chunks vectorized by the compiler for AVX2 (flags in kernels/CMakeLists.txt).
#include "normal_impl.h"

namespace strata::cpu {

void NormalChunksAvx2(const uint32_t k[4], uint32_t first_chunk, size_t n, float mean, float std, float* out) {
  NormalChunks(k, first_chunk, n, mean, std, out);
}

}  // namespace strata::cpu
