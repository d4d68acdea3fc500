// AVX-512 AdamW and gradient pass (compiled with -mavx512f/bw/vl/dq/bf16; called only when
// ActiveIsa() is kAvx512). Two flavours of the bf16 copy: the AVX512_BF16 instruction
// (rounds to nearest even; like all of that extension it treats fp32 subnormals as zero)
// or the same rounding done with integer ops on CPUs without it.
#include <immintrin.h>

// GCC 12 reports its own `__m512 __Y = __Y;` idiom inside the AVX-512 intrinsic headers as
// uninitialized once they are inlined here (a known false positive); silence it for this file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // (a GCC-only warning group)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "adam_impl.h"
#include "lamb_impl.h"
#include "muon_impl.h"
#include "bf16_avx512.h"

namespace strata::cpu {
namespace {

template <bool kHardwareBf16>
struct Avx512Ops {
  static constexpr size_t kWidth = 16;
  using F = __m512;
  static F Set1(float x) { return _mm512_set1_ps(x); }
  static F Load(const float* x) { return _mm512_loadu_ps(x); }
  static void Store(float* x, F v) { _mm512_storeu_ps(x, v); }
  static F LoadBf16(const uint16_t* x) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  template <bool kStream>
  static void StoreHalf(uint16_t* x, __m256i h) {
    if constexpr (kStream) _mm256_stream_si256(reinterpret_cast<__m256i*>(x), h);
    else _mm256_storeu_si256(reinterpret_cast<__m256i*>(x), h);
  }
  template <bool kStream>
  static void StoreBf16(uint16_t* x, F v) {
    if constexpr (kHardwareBf16) StoreHalf<kStream>(x, (__m256i)_mm512_cvtneps_pbh(v));
    else StoreHalf<kStream>(x, RoundToBf16Bits(v));
  }
  template <bool kStream>
  static void StoreFp16(uint16_t* x, F v) {
    StoreHalf<kStream>(x, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // A split master (Note [Split master]): bits = (w << 16) + low; written back as w = the
  // nearest-even bf16 (integer ops on every CPU: AVX512_BF16's instruction flushes
  // subnormals, which would change the stored master) and low = the difference, saturated.
  static F LoadSplit(const uint16_t* w, const int16_t* lo) {
    const __m512i hi = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w))), 16);
    const __m512i low = _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo)));
    return _mm512_castsi512_ps(_mm512_add_epi32(hi, low));
  }
  static void StoreSplit(uint16_t* w, int16_t* lo, F p) {
    const __m512i h = RoundToBf16Lanes(p);
    const __m512i d = _mm512_sub_epi32(_mm512_castps_si512(p), _mm512_slli_epi32(h, 16));
    StoreHalf<false>(w, _mm512_cvtepi32_epi16(h));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo), _mm512_cvtsepi32_epi16(d));
  }
  static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F Sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F Div(F a, F b) { return _mm512_div_ps(a, b); }
  static F Sqrt(F a) { return _mm512_sqrt_ps(a); }
  static F Fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  // x's sign bit xor'ed into v (Lion's -lr * sign(x), Note [Update rules]).
  static F XorSign(F x, F v) { return _mm512_xor_ps(_mm512_and_ps(x, _mm512_set1_ps(-0.0f)), v); }
  static void Fence() { _mm_sfence(); }
  static void Prefetch(const void* x) { _mm_prefetch(static_cast<const char*>(x), _MM_HINT_T0); }
  using U = __m512i;
  static U SetU(uint32_t x) { return _mm512_set1_epi32(static_cast<int>(x)); }
  static U CounterU(uint32_t first) {
    return _mm512_add_epi32(SetU(first), _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  }
  static U XorU(U a, U b) { return _mm512_xor_si512(a, b); }
  static U SrlU(U a, int k) { return _mm512_srli_epi32(a, static_cast<unsigned>(k)); }
  static U MulU(U a, U b) { return _mm512_mullo_epi32(a, b); }
  static void StoreMomentsBf16(uint16_t* m16, F m, uint16_t* v16, F v, U bits) {
    StoreHalf<false>(m16, StochasticRoundToBf16Bits(m, _mm512_and_si512(bits, _mm512_set1_epi32(0xffff))));
    StoreHalf<false>(v16, StochasticRoundToBf16Bits(v, _mm512_srli_epi32(bits, 16)));
  }
  // Gradient pass: squares accumulated in double, 8 lanes per half.
  struct D {
    __m512d lo, hi;
  };
  static D ZeroD() { return {_mm512_setzero_pd(), _mm512_setzero_pd()}; }
  static F LoadAny(const float* x) { return Load(x); }
  static F LoadAny(const uint16_t* x) { return LoadBf16(x); }
  static void AccumulateSquares(D& acc, F x) {
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
    const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    acc.lo = _mm512_fmadd_pd(lo, lo, acc.lo);
    acc.hi = _mm512_fmadd_pd(hi, hi, acc.hi);
  }
  static double ReduceD(const D& acc) { return _mm512_reduce_add_pd(_mm512_add_pd(acc.lo, acc.hi)); }
};

using Narrow = ScalarOps</*kHardwareFma=*/true>;

}  // namespace

void AdamRangeAvx512(const AdamArgs& a, size_t begin, size_t end) {
  AdamRangeDispatch<Avx512Ops<false>, Narrow>(a, begin, end);
}

void AdamRangeAvx512Bf16(const AdamArgs& a, size_t begin, size_t end) {
  AdamRangeDispatch<Avx512Ops<true>, Narrow>(a, begin, end);
}

void LambSumsAvx512(const AdamArgs& a, size_t begin, size_t end, double* w, double* u) {
  LambSumsDispatch<Avx512Ops<false>, Narrow>(a, begin, end, w, u);
}

void MuonNesterovAvx512(const AdamArgs& a, size_t begin, size_t end, float* out) {
  MuonNesterovDispatch<Avx512Ops<false>, Narrow>(a, begin, end, out);
}

double SumSquaresAvx512(const float* x, size_t begin, size_t end) {
  return SumSquaresT<Avx512Ops<false>, Narrow>(x, begin, end);
}

double SumSquaresBf16Avx512(const uint16_t* x, size_t begin, size_t end) {
  return SumSquaresT<Avx512Ops<false>, Narrow>(x, begin, end);
}

void AccumulateAvx512(float* acc, const float* part, float scale, bool overwrite, size_t begin, size_t end) {
  AccumulateT<Avx512Ops<false>, Narrow>(acc, part, scale, overwrite, begin, end);
}

void AccumulateAvx512(uint16_t* acc, const float* part, float scale, bool overwrite, size_t begin, size_t end) {
  AccumulateT<Avx512Ops<false>, Narrow>(acc, part, scale, overwrite, begin, end);
}

void AccumulateAvx512(float* acc, const uint16_t* part, float scale, bool overwrite, size_t begin, size_t end) {
  AccumulateT<Avx512Ops<false>, Narrow>(acc, part, scale, overwrite, begin, end);
}

void AccumulateAvx512(uint16_t* acc, const uint16_t* part, float scale, bool overwrite, size_t begin, size_t end) {
  AccumulateT<Avx512Ops<false>, Narrow>(acc, part, scale, overwrite, begin, end);
}

void SplitMasterAvx512(const float* p, uint16_t* w, int16_t* lo, size_t n) {
  SplitMasterT<Avx512Ops<false>, Narrow>(p, w, lo, n);
}

void JoinMasterAvx512(const uint16_t* w, const int16_t* lo, float* p, size_t n) {
  JoinMasterT<Avx512Ops<false>, Narrow>(w, lo, p, n);
}

}  // namespace strata::cpu
