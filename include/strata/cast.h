// Precision casts on the CPU: fp32 -> bf16 / fp16 with round-to-nearest-even (or, for bf16,
// stochastic rounding with caller-supplied random bits), and back.
// bf16 and fp16 values are carried as uint16_t bit patterns. Any length, any alignment;
// src and dst must not overlap. Runs on the calling thread (callers parallelise by span).
#pragma once

#include <cstdint>
#include <span>

namespace strata {

// Scalar reference conversions (one element), exact RNE; NaN stays NaN (quiet).
uint16_t Fp32ToBf16(float x);
float Bf16ToFp32(uint16_t x);
uint16_t Fp32ToFp16(float x);
float Fp16ToFp32(uint16_t x);

// fp32 -> bf16 with stochastic rounding: the low 16 bits of `random` (uniform, the caller's)
// are added to x's bit pattern, which is then truncated to its high half. x rounds away from
// zero with probability |x - truncated| / ulp, so the expected result is x exactly, for
// either sign and for subnormals (bf16 steps are linear in the bit pattern within a binade,
// and a carry moves to the next one). Values above the largest bf16 may round to Inf with
// that probability; Inf stays Inf, NaN stays NaN (quiet), zero stays zero.
uint16_t Fp32ToBf16Stochastic(float x, uint32_t random);

// dst.size() must equal src.size() (checked). Dispatches on ActiveIsa().
void CastFp32ToBf16(std::span<const float> src, std::span<uint16_t> dst);
void CastBf16ToFp32(std::span<const uint16_t> src, std::span<float> dst);

}  // namespace strata
