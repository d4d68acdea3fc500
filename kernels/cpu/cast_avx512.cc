// AVX-512 fp32 -> bf16. With AVX512_BF16 the hardware instruction rounds to nearest even;
// without it the same rounding is done with integer ops (the same results, except that the
// instruction flushes fp32 subnormals to zero; NaN quieted either way).
#include <immintrin.h>

// GCC 12's false "may be used uninitialized" inside the AVX-512 intrinsic headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // (a GCC-only warning group)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "bf16_avx512.h"
#include "cast_impl.h"
#include "strata/isa.h"

namespace strata::cpu {

void CastFp32ToBf16Avx512(const float* src, uint16_t* dst, size_t n) {
  const bool hw = DetectCpuFeatures().avx512_bf16;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 x = _mm512_loadu_ps(src + i);
    __m256i h = hw ? (__m256i)_mm512_cvtneps_pbh(x) : RoundToBf16Bits(x);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 x = _mm512_maskz_loadu_ps(m, src + i);
    __m256i h = hw ? (__m256i)_mm512_cvtneps_pbh(x) : RoundToBf16Bits(x);
    _mm256_mask_storeu_epi16(dst + i, m, h);
  }
}

}  // namespace strata::cpu
