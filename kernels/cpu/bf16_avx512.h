// Folder-private: fp32 -> bf16 bits with AVX-512 integer ops, round to nearest even, NaN kept
// (quiet). For CPUs without AVX512_BF16, whose instruction gives the same results except
// that it flushes fp32 subnormals to zero. Include only from files compiled with AVX-512 flags.
#pragma once

#include <immintrin.h>

namespace strata::cpu {

// The bits in the low half of each 32-bit lane ...
inline __m512i RoundToBf16Lanes(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x400000));
  return _mm512_srli_epi32(r, 16);
}

// ... or packed to 16 bits.
inline __m256i RoundToBf16Bits(__m512 x) { return _mm512_cvtepi32_epi16(RoundToBf16Lanes(x)); }

// fp32 -> bf16 bits with stochastic rounding: `random` (16 bits per lane, in the low half)
// added to the bit pattern, then truncated; NaN kept (quiet). Fp32ToBf16Stochastic's rule.
inline __m256i StochasticRoundToBf16Bits(__m512 x, __m512i random) {
  const __m512i u = _mm512_castps_si512(x);
  __m512i r = _mm512_add_epi32(u, random);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x400000));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

}  // namespace strata::cpu
