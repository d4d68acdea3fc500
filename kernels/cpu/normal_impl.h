// Folder-private: the body of FillNormal (strata/normal.h), included by one translation
// unit per ISA (normal.cc, normal_avx2.cc, normal_avx512.cc), each compiled with
// -ffp-contract=off. Internal linkage: the three copies differ in their instructions.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "bits_impl.h"

// Note [Normal draws]
// Pair p of a stream (p = 16 x chunk + j) is a Box-Muller transform of two 32-bit words,
// each a keyed hash of p: two rounds of lowbias32 (C. Wellons' hash-prospector) with a key
// word added before the first and xor-ed before the second. u1 = (2 x (a >> 9) + 1) 2^-24 is
// in (0, 1) and exact in fp32 (so |z| <= sqrt(-2 ln 2^-24) = 5.77); the angle is 2 pi u2 with
// u2 = (b >> 8) 2^-24. ln u1 = e ln 2 + ln m from u1's exponent and mantissa (m in
// [sqrt 1/2, sqrt 2), the atanh series in (m - 1) / (m + 1) to t^9); sin and cos of the
// angle's offset from its nearest quadrant (within pi/4) by Taylor series to x^9 and x^10,
// then swapped and negated by the quadrant: errors below 1e-6 of a value. The loop over a
// chunk's 16 pairs is plain C++ with only +, -, *, /, sqrt, integer ops and selects, which each
// ISA's unit vectorizes at its own width; without FMA contraction every path rounds the
// same way, so the values are bitwise the same on every CPU (tests/kernels/normal_test.cc).
namespace strata::cpu {
namespace {

constexpr int kNormalPairs = 16;  // per chunk: 16 cosines, then the 16 sines

// Chunk `chunk` of the stream keyed by k[0..3], scaled: out[0..32).
inline void NormalChunk(const uint32_t k[4], uint32_t chunk, float mean, float std, float* out) {
  for (int j = 0; j < kNormalPairs; ++j) {
    const uint32_t p = chunk * kNormalPairs + static_cast<uint32_t>(j);
    const uint32_t a = Lowbias32(Lowbias32(p + k[0]) ^ k[1]);
    const uint32_t b = Lowbias32(Lowbias32(p + k[2]) ^ k[3]);
    // ln u1
    const float u1 = static_cast<float>(((a >> 9) << 1) | 1U) * 0x1p-24f;
    const uint32_t bits = BitsOfFloat(u1);
    const bool high = (bits & 0x7fffffU) > 0x3504f3U;  // mantissa above sqrt 2
    const float m = FloatOfBits((bits & 0x7fffffU) | (high ? 0x3f000000U : 0x3f800000U));
    const float e = static_cast<float>(static_cast<int32_t>(bits >> 23) - (high ? 126 : 127));
    const float t = (m - 1.0f) / (m + 1.0f), t2 = t * t;
    const float ln_m = 2.0f * t * (1.0f + t2 * (1.0f / 3 + t2 * (1.0f / 5 + t2 * (1.0f / 7 + t2 * (1.0f / 9)))));
    const float r = std::sqrt(-2.0f * (e * 0.693147180559945f + ln_m));
    // cos and sin of 2 pi u2 = q pi/2 + x, q the nearest quadrant, |x| <= pi/4
    const uint32_t n = b >> 8;
    const uint32_t q = (n + (1U << 21)) >> 22;
    const float x = static_cast<float>(static_cast<int32_t>(n) - static_cast<int32_t>(q << 22)) *
                    (1.57079632679489662f * 0x1p-22f);
    const float x2 = x * x;
    const float sn = x * (1.0f + x2 * (-1.0f / 6 + x2 * (1.0f / 120 + x2 * (-1.0f / 5040 + x2 * (1.0f / 362880)))));
    const float cs = 1.0f + x2 * (-0.5f + x2 * (1.0f / 24 + x2 * (-1.0f / 720 + x2 * (1.0f / 40320 + x2 * (-1.0f / 3628800)))));
    const uint32_t quadrant = q & 3U;
    const float cos_v = quadrant == 0 ? cs : quadrant == 1 ? -sn : quadrant == 2 ? -cs : sn;
    const float sin_v = quadrant == 0 ? sn : quadrant == 1 ? cs : quadrant == 2 ? -sn : -cs;
    out[j] = mean + std * (r * cos_v);
    out[kNormalPairs + j] = mean + std * (r * sin_v);
  }
}

// out[0, n): values from chunk `first_chunk` on (n a multiple of 2 x kNormalPairs).
inline void NormalChunks(const uint32_t k[4], uint32_t first_chunk, size_t n, float mean, float std, float* out) {
  for (size_t i = 0; i < n; i += 2 * kNormalPairs)
    NormalChunk(k, first_chunk + static_cast<uint32_t>(i / (2 * kNormalPairs)), mean, std, out + i);
}

}  // namespace

// Per-ISA entry points (call only when ActiveIsa() allows them).
void NormalChunksScalar(const uint32_t k[4], uint32_t first_chunk, size_t n, float mean, float std, float* out);
void NormalChunksAvx2(const uint32_t k[4], uint32_t first_chunk, size_t n, float mean, float std, float* out);
void NormalChunksAvx512(const uint32_t k[4], uint32_t first_chunk, size_t n, float mean, float std, float* out);

}  // namespace strata::cpu
