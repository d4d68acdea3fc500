// AVX2 + FMA + F16C AdamW and gradient pass (compiled with -mavx2 -mfma -mf16c; called
// only when ActiveIsa() is at least kAvx2). bf16 rounding is done with integer ops (no
// hardware conversion at this level); fp16 uses F16C's round-to-nearest-even.
#include <immintrin.h>

#include "adam_impl.h"
#include "lamb_impl.h"
#include "muon_impl.h"

namespace strata::cpu {
namespace {

// Nearest-even bf16 bits in the low half of each lane (before the pack), NaN kept quiet.
inline __m256i RoundToBf16Lanes(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_srli_epi32(_mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan), 16);
}

// fp32 -> bf16 bits (8 lanes, packed into the low 128 bits), nearest even, NaN kept quiet.
inline __m128i RoundToBf16Bits(__m256 x) {
  const __m256i r = RoundToBf16Lanes(x);
  // packus works per 128-bit lane: [r0..3 r0..3 | r4..7 r4..7]; gather lanes 0 and 2.
  const __m256i packed = _mm256_packus_epi32(r, r);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0b1000));
}

// Stochastic rounding (Fp32ToBf16Stochastic's rule) before the pack: `random` (16 bits per
// lane, in the low half) added to the bit pattern; bf16 bits in the low half of each lane.
inline __m256i StochasticRoundToBf16Lanes(__m256 x, __m256i random) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i r = _mm256_add_epi32(u, random);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_srli_epi32(_mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan), 16);
}

struct Avx2Ops {
  static constexpr size_t kWidth = 8;
  using F = __m256;
  static F Set1(float x) { return _mm256_set1_ps(x); }
  static F Load(const float* x) { return _mm256_loadu_ps(x); }
  static void Store(float* x, F v) { _mm256_storeu_ps(x, v); }
  static F LoadBf16(const uint16_t* x) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  template <bool kStream>
  static void StoreHalf(uint16_t* x, __m128i h) {
    if constexpr (kStream) _mm_stream_si128(reinterpret_cast<__m128i*>(x), h);
    else _mm_storeu_si128(reinterpret_cast<__m128i*>(x), h);
  }
  template <bool kStream>
  static void StoreBf16(uint16_t* x, F v) { StoreHalf<kStream>(x, RoundToBf16Bits(v)); }
  template <bool kStream>
  static void StoreFp16(uint16_t* x, F v) {
    StoreHalf<kStream>(x, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // A split master (Note [Split master]): bits = (w << 16) + low; written back as w = the
  // nearest-even bf16 and low = the difference, saturated to 16 bits.
  static F LoadSplit(const uint16_t* w, const int16_t* lo) {
    const __m256i hi = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w))), 16);
    const __m256i low = _mm256_cvtepi16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo)));
    return _mm256_castsi256_ps(_mm256_add_epi32(hi, low));
  }
  static void StoreSplit(uint16_t* w, int16_t* lo, F p) {
    const __m256i h = RoundToBf16Lanes(p);
    const __m256i d = _mm256_sub_epi32(_mm256_castps_si256(p), _mm256_slli_epi32(h, 16));
    // Packed as RoundToBf16Bits does, d with signed saturation.
    const __m256i hp = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0b1000);
    const __m256i dp = _mm256_permute4x64_epi64(_mm256_packs_epi32(d, d), 0b1000);
    StoreHalf<false>(w, _mm256_castsi256_si128(hp));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lo), _mm256_castsi256_si128(dp));
  }
  static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F Sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F Div(F a, F b) { return _mm256_div_ps(a, b); }
  static F Sqrt(F a) { return _mm256_sqrt_ps(a); }
  static F Fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  // x's sign bit xor'ed into v (Lion's -lr * sign(x), Note [Update rules]).
  static F XorSign(F x, F v) { return _mm256_xor_ps(_mm256_and_ps(x, _mm256_set1_ps(-0.0f)), v); }
  static void Fence() { _mm_sfence(); }
  static void Prefetch(const void* x) { _mm_prefetch(static_cast<const char*>(x), _MM_HINT_T0); }
  using U = __m256i;
  static U SetU(uint32_t x) { return _mm256_set1_epi32(static_cast<int>(x)); }
  static U CounterU(uint32_t first) { return _mm256_add_epi32(SetU(first), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }
  static U XorU(U a, U b) { return _mm256_xor_si256(a, b); }
  static U SrlU(U a, int k) { return _mm256_srli_epi32(a, k); }
  static U MulU(U a, U b) { return _mm256_mullo_epi32(a, b); }
  static void StoreMomentsBf16(uint16_t* m16, F m, uint16_t* v16, F v, U bits) {
    const __m256i rm = StochasticRoundToBf16Lanes(m, _mm256_and_si256(bits, _mm256_set1_epi32(0xffff)));
    const __m256i rv = StochasticRoundToBf16Lanes(v, _mm256_srli_epi32(bits, 16));
    // One pack for both: [m0-3 v0-3 | m4-7 v4-7] -> [m0-7 | v0-7].
    const __m256i mv = _mm256_permute4x64_epi64(_mm256_packus_epi32(rm, rv), 0b11011000);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(m16), _mm256_castsi256_si128(mv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(v16), _mm256_extracti128_si256(mv, 1));
  }
  struct D {
    __m256d lo, hi;
  };
  static D ZeroD() { return {_mm256_setzero_pd(), _mm256_setzero_pd()}; }
  static F LoadAny(const float* x) { return Load(x); }
  static F LoadAny(const uint16_t* x) { return LoadBf16(x); }
  static void AccumulateSquares(D& acc, F x) {
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
    acc.lo = _mm256_fmadd_pd(lo, lo, acc.lo);
    acc.hi = _mm256_fmadd_pd(hi, hi, acc.hi);
  }
  static double ReduceD(const D& acc) {
    const __m256d s = _mm256_add_pd(acc.lo, acc.hi);
    const __m128d t = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(_mm_add_sd(t, _mm_unpackhi_pd(t, t)));
  }
};

using Narrow = ScalarOps</*kHardwareFma=*/true>;

}  // namespace

void AdamRangeAvx2(const AdamArgs& a, size_t begin, size_t end) {
  AdamRangeDispatch<Avx2Ops, Narrow>(a, begin, end);
}

void LambSumsAvx2(const AdamArgs& a, size_t begin, size_t end, double* w, double* u) {
  LambSumsDispatch<Avx2Ops, Narrow>(a, begin, end, w, u);
}

void MuonNesterovAvx2(const AdamArgs& a, size_t begin, size_t end, float* out) {
  MuonNesterovDispatch<Avx2Ops, Narrow>(a, begin, end, out);
}

double SumSquaresAvx2(const float* x, size_t begin, size_t end) {
  return SumSquaresT<Avx2Ops, Narrow>(x, begin, end);
}

double SumSquaresBf16Avx2(const uint16_t* x, size_t begin, size_t end) {
  return SumSquaresT<Avx2Ops, Narrow>(x, begin, end);
}

void AccumulateAvx2(float* acc, const float* part, float scale, bool overwrite, size_t begin, size_t end) {
  AccumulateT<Avx2Ops, Narrow>(acc, part, scale, overwrite, begin, end);
}

void AccumulateAvx2(uint16_t* acc, const float* part, float scale, bool overwrite, size_t begin, size_t end) {
  AccumulateT<Avx2Ops, Narrow>(acc, part, scale, overwrite, begin, end);
}

void AccumulateAvx2(float* acc, const uint16_t* part, float scale, bool overwrite, size_t begin, size_t end) {
  AccumulateT<Avx2Ops, Narrow>(acc, part, scale, overwrite, begin, end);
}

void AccumulateAvx2(uint16_t* acc, const uint16_t* part, float scale, bool overwrite, size_t begin, size_t end) {
  AccumulateT<Avx2Ops, Narrow>(acc, part, scale, overwrite, begin, end);
}

void SplitMasterAvx2(const float* p, uint16_t* w, int16_t* lo, size_t n) {
  SplitMasterT<Avx2Ops, Narrow>(p, w, lo, n);
}

void JoinMasterAvx2(const uint16_t* w, const int16_t* lo, float* p, size_t n) {
  JoinMasterT<Avx2Ops, Narrow>(w, lo, p, n);
}

}  // namespace strata::cpu
