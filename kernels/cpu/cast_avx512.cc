// AVX-512 fp32 -> bf16. With AVX512_BF16 the hardware instruction rounds to nearest even;
// without it the same rounding is done with integer ops (identical results, NaN quieted).
#include <immintrin.h>

#include "kernels/cpu/cast_impl.h"
#include "strata/isa.h"

namespace strata::cpu {
namespace {

inline __m256i RoundToBf16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x400000));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

}  // namespace

void CastFp32ToBf16Avx512(const float* src, uint16_t* dst, size_t n) {
  const bool hw = DetectCpuFeatures().avx512_bf16;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 x = _mm512_loadu_ps(src + i);
    __m256i h = hw ? (__m256i)_mm512_cvtneps_pbh(x) : RoundToBf16(x);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 x = _mm512_maskz_loadu_ps(m, src + i);
    __m256i h = hw ? (__m256i)_mm512_cvtneps_pbh(x) : RoundToBf16(x);
    _mm256_mask_storeu_epi16(dst + i, m, h);
  }
}

}  // namespace strata::cpu
