#include "strata/cast.h"

#include <cstring>

#include "cast_impl.h"
#include "strata/check.h"
#include "strata/isa.h"

namespace strata {

uint16_t Fp32ToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

uint16_t Fp32ToBf16Stochastic(float x, uint32_t random) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  return static_cast<uint16_t>((u + (random & 0xffffu)) >> 16);
}

float Bf16ToFp32(uint16_t x) {
  uint32_t u = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t Fp32ToFp16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow (after rounding) -> inf
  if (abs < 0x38800000u) {  // subnormal or zero in fp16: align the mantissa, round to nearest even
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
    const uint32_t exp = abs >> 23, mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14 + (113 - exp) - 1 ... yields a value in units of 2^-24
    uint32_t val = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (val & 1u))) ++val;
    return static_cast<uint16_t>(sign | val);
  }
  abs += 0xfffu + ((abs >> 13) & 1u);  // RNE at bit 13
  return static_cast<uint16_t>(sign | ((abs - 0x38000000u) >> 13));
}

float Fp16ToFp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do { ++e; mant <<= 1; } while (!(mant & 0x400u));
      u = sign | ((112u - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else {
    u = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void CastFp32ToBf16(std::span<const float> src, std::span<uint16_t> dst) {
  STRATA_CHECK(src.size() == dst.size()) << src.size() << " vs " << dst.size();
  if (ActiveIsa() == IsaLevel::kAvx512) {
    cpu::CastFp32ToBf16Avx512(src.data(), dst.data(), src.size());
    return;
  }
  for (size_t i = 0; i < src.size(); ++i) dst[i] = Fp32ToBf16(src[i]);
}

void CastBf16ToFp32(std::span<const uint16_t> src, std::span<float> dst) {
  STRATA_CHECK(src.size() == dst.size()) << src.size() << " vs " << dst.size();
  for (size_t i = 0; i < src.size(); ++i) dst[i] = Bf16ToFp32(src[i]);
}

}  // namespace strata
