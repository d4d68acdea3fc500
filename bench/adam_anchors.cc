#include "bench/adam_anchors.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <span>

#include "strata/cast.h"
#include "strata/isa.h"

// GCC 12's AVX-512 intrinsic headers trip its own uninitialized warnings (a false positive).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"


namespace strata::bench {
namespace {

// Contiguous per-thread ranges with boundaries on 64-byte lines of `p`, as in AdamStep.
template <class Fn>
void ForThreadRanges(const float* p, size_t n, int threads, Fn&& fn) {
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const size_t head = (reinterpret_cast<uintptr_t>(p) % 64) ? (64 - reinterpret_cast<uintptr_t>(p) % 64) / 4 : 0;
    const size_t first = std::min(n, head), per = ((n - first) / nt + 15) / 16 * 16;
    auto at = [&](int k) { return k == 0 ? size_t{0} : k == nt ? n : std::min(n, first + k * per); };
    if (at(t) < at(t + 1)) fn(at(t), at(t + 1));
  }
}

// The same software prefetch as the kernel (kernels/cpu/adam_impl.h, Note [Adam memory
// traffic]): the access pattern includes it, so the roofline is the best memory-only pass.
constexpr size_t kAheadFloats = 1024 / sizeof(float);
template <bool kV>
inline void Prefetch4(const float* p, const float* g, const float* m, const float* v, size_t i) {
  __builtin_prefetch(p + i, 0, 3);
  __builtin_prefetch(g + i, 0, 3);
  __builtin_prefetch(m + i, 0, 3);
  if constexpr (kV) __builtin_prefetch(v + i, 0, 3);
}

// The register barrier makes the compiler keep every load and store but do no arithmetic.
// kV: with Adam's second state (r4 w3); without it, one state's pattern (Lion, Adagrad: r3 w2).
template <bool kV>
void RooflineScalar(float* p, const float* g, float* m, float* v, uint16_t* half, size_t b, size_t e) {
  for (size_t i = b; i < e; ++i) {
    float a = p[i], c = m[i], d = kV ? v[i] : 0.0f;
    const float x = g[i];
    asm volatile("" : "+x"(a), "+x"(c), "+x"(d) : "x"(x));
    p[i] = a, m[i] = c;
    if constexpr (kV) v[i] = d;
    if (half) {
      uint32_t bits;
      std::memcpy(&bits, &a, 4);
      half[i] = static_cast<uint16_t>(bits >> 16);
    }
  }
}

template <bool kV>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void RooflineAvx512(float* p, const float* g, float* m,
                                                                          float* v, uint16_t* half, size_t b,
                                                                          size_t e) {
  size_t i = b;
  while (i < e && reinterpret_cast<uintptr_t>(p + i) % 64) ++i;
  RooflineScalar<kV>(p, g, m, v, half, b, i);
  const bool stream = half && reinterpret_cast<uintptr_t>(half + i) % 32 == 0;
  for (; i + 16 <= e; i += 16) {
    Prefetch4<kV>(p, g, m, v, i + kAheadFloats);
    __m512 a = _mm512_loadu_ps(p + i), c = _mm512_loadu_ps(m + i), d = kV ? _mm512_loadu_ps(v + i) : a;
    const __m512 x = _mm512_loadu_ps(g + i);
    asm volatile("" : "+v"(a), "+v"(c), "+v"(d) : "v"(x));
    _mm512_storeu_ps(p + i, a);
    _mm512_storeu_ps(m + i, c);
    if constexpr (kV) _mm512_storeu_ps(v + i, d);
    if (half) {
      const __m256i h = _mm512_castsi512_si256(_mm512_castps_si512(a));  // 32 bytes, no conversion
      if (stream) _mm256_stream_si256(reinterpret_cast<__m256i*>(half + i), h);
      else _mm256_storeu_si256(reinterpret_cast<__m256i*>(half + i), h);
    }
  }
  _mm_sfence();
  RooflineScalar<kV>(p, g, m, v, half, i, e);
}

template <bool kV>
__attribute__((target("avx2"))) void RooflineAvx2(float* p, const float* g, float* m, float* v, uint16_t* half,
                                                  size_t b, size_t e) {
  size_t i = b;
  while (i < e && reinterpret_cast<uintptr_t>(p + i) % 64) ++i;
  RooflineScalar<kV>(p, g, m, v, half, b, i);
  const bool stream = half && reinterpret_cast<uintptr_t>(half + i) % 16 == 0;
  for (; i + 8 <= e; i += 8) {
    Prefetch4<kV>(p, g, m, v, i + kAheadFloats);
    __m256 a = _mm256_loadu_ps(p + i), c = _mm256_loadu_ps(m + i), d = kV ? _mm256_loadu_ps(v + i) : a;
    const __m256 x = _mm256_loadu_ps(g + i);
    asm volatile("" : "+x"(a), "+x"(c), "+x"(d) : "x"(x));
    _mm256_storeu_ps(p + i, a);
    _mm256_storeu_ps(m + i, c);
    if constexpr (kV) _mm256_storeu_ps(v + i, d);
    if (half) {
      const __m128i h = _mm256_castsi256_si128(_mm256_castps_si256(a));
      if (stream) _mm_stream_si128(reinterpret_cast<__m128i*>(half + i), h);
      else _mm_storeu_si128(reinterpret_cast<__m128i*>(half + i), h);
    }
  }
  _mm_sfence();
  RooflineScalar<kV>(p, g, m, v, half, i, e);
}

}  // namespace

void RooflinePass(float* p, const float* g, float* m, float* v, uint16_t* half, size_t n, int threads) {
  const IsaLevel isa = ActiveIsa();  // the width the Adam kernel uses
  ForThreadRanges(p, n, threads, [&](size_t b, size_t e) {
    if (v) {
      if (isa == IsaLevel::kAvx512) RooflineAvx512<true>(p, g, m, v, half, b, e);
      else if (isa == IsaLevel::kAvx2) RooflineAvx2<true>(p, g, m, v, half, b, e);
      else RooflineScalar<true>(p, g, m, v, half, b, e);
    } else {
      if (isa == IsaLevel::kAvx512) RooflineAvx512<false>(p, g, m, v, half, b, e);
      else if (isa == IsaLevel::kAvx2) RooflineAvx2<false>(p, g, m, v, half, b, e);
      else RooflineScalar<false>(p, g, m, v, half, b, e);
    }
  });
}

void TriadPass(float* a, const float* b, const float* c, size_t n, int threads) {
  ForThreadRanges(a, n, threads, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) a[i] = b[i] + 3.0f * c[i];
  });
}

void HandCastFp32ToBf16(const float* src, uint16_t* dst, size_t n, int threads) {
  ForThreadRanges(src, n, threads, [&](size_t b, size_t e) {
    CastFp32ToBf16(std::span<const float>(src + b, e - b), std::span<uint16_t>(dst + b, e - b));
  });
}

#if !STRATA_HAVE_ONEDNN
std::unique_ptr<OneDnnTransforms> MakeOneDnnTransforms(const float*, uint16_t*, size_t) { return nullptr; }
#endif

}  // namespace strata::bench
