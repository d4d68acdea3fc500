// Folder-private: Adam's m and v in 8 bits per element, blockwise (Note [8-bit moments] in
// strata/cpu_adam.h). Plain loops over one block of at most kBlock8Bit elements: integer
// and exact float ops only, so that every ISA file (each compiles them with its own -m
// flags and vectorizes them) gives the same codes, and block-local, so that the update's
// extra passes run over L1, not over memory.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "bits_impl.h"

namespace strata::cpu {

inline constexpr size_t kBlock8Bit = 256;

// A code: (sign bit for m) and an unsigned magnitude q. q >= 2^kMant is a normal value
// 2^e * (1 + f / 2^kMant), e in [kMinExp, 0], relative to the block's absolute maximum; q below
// it is q * 2^(kMinExp - kMant) (evenly spaced down to zero).
template <int kMant, int kMinExp, bool kSigned>
struct Format8Bit {
  static constexpr uint32_t kNormal = 1u << kMant;                       // smallest normal q
  static constexpr uint32_t kDrop = 23 - kMant;                          // fp32 mantissa bits dropped
  static constexpr uint32_t kBias = static_cast<uint32_t>(126 + kMinExp) << kMant;  // q = (bits >> kDrop) - kBias
  static constexpr uint32_t kMaxQ = static_cast<uint32_t>(1 - kMinExp) << kMant;   // q of 1.0
  static_assert(kMaxQ <= (kSigned ? 127u : 255u), "the format does not fit its bits");
  static constexpr float kSubStep = static_cast<float>(1.0 / (1ull << (kMant - kMinExp)));  // 2^(kMinExp - kMant)
  static constexpr float kSubScale = static_cast<float>(1ull << (kMant - kMinExp));
  static constexpr float kMinNormal = static_cast<float>(1.0 / (1ull << -kMinExp));
};
// m: sign, 4 mantissa bits, 7 octaves below the maximum (subnormal steps of 2^-10 of it).
using FormatM = Format8Bit<4, -6, true>;
// v (>= 0): 4 mantissa bits, 15 octaves (sqrt(v), what the update divides by: 7.5).
using FormatV = Format8Bit<4, -14, false>;

namespace {

// hash[j] = Lowbias32(counter + j), j < n: the random bits of a block's elements, drawn once
// for m (their low half) and v (their high half), as the bf16 moments take theirs.
inline void Hashes8BitBlock(uint32_t counter, size_t n, uint32_t* hash) {
  for (size_t j = 0; j < n; ++j) hash[j] = Lowbias32(counter + static_cast<uint32_t>(j));
}

// x[0, n) (n <= kBlock8Bit) to codes and the block's scale (its largest |x|, whose code is
// exactly 1), rounded stochastically: element j's 16 random bits are hash[j] >> shift (0: low
// half, m; 16: high half, v); or, with no `hash`, to the nearest code (then decoded values
// encode back to their own codes: x / scale is within an ulp or two of a code, and the
// largest is exactly 1 again).
template <class Fmt, bool kSigned>
inline void Encode8BitBlock(const float* x, size_t n, uint8_t* code, float* scale, const uint32_t* hash, int shift) {
  const bool nearest = hash == nullptr;
  uint32_t max_bits = 0;  // |x| as bits: the integer order of non-negative floats is theirs
  for (size_t j = 0; j < n; ++j) max_bits = std::max(max_bits, BitsOfFloat(x[j]) & 0x7fffffffu);
  const float amax = FloatOfBits(max_bits);
  *scale = amax;
  if (max_bits == 0) {
    std::memset(code, 0, n);
    return;
  }
  const float inv = 1.0f / amax;
  for (size_t j = 0; j < n; ++j) {
    const uint32_t bits = BitsOfFloat(x[j]);
    const float scaled = FloatOfBits(bits & 0x7fffffffu) * inv;
    // (|x| * (1 / amax) may round either way of 1.) Selects by masks: the loop stays branch-free and vectorizes.
    const uint32_t below_one = 0u - static_cast<uint32_t>((scaled < 1.0f) & ((bits & 0x7fffffffu) != max_bits));
    const float r = FloatOfBits((BitsOfFloat(scaled) & below_one) | (0x3f800000u & ~below_one));
    const uint32_t rnd = nearest ? 0x8000u : (hash[j] >> shift) & 0xffffu;
    // Below the smallest normal: evenly spaced, r * 2^(kMant - kMinExp) + u truncated (the
    // product is exact, so a fused multiply-add gives the same sum).
    const auto sub = static_cast<uint32_t>(static_cast<int32_t>(r * Fmt::kSubScale + static_cast<float>(rnd) * (1.0f / 65536.0f)));
    // Normal: random bits added below the kept mantissa bits, then truncated (a carry moves
    // the exponent, as rounding up should).
    const uint32_t rounded = (BitsOfFloat(r) + (rnd << (Fmt::kDrop - 16))) >> Fmt::kDrop;
    const uint32_t small = 0u - static_cast<uint32_t>(r < Fmt::kMinNormal);
    uint32_t q = (sub & small) | ((rounded - Fmt::kBias) & ~small);
    if constexpr (kSigned) q |= (bits >> 31) << 7;
    code[j] = static_cast<uint8_t>(q);
  }
}

template <class Fmt, bool kSigned>
inline void Decode8BitBlock(const uint8_t* code, float scale, size_t n, float* x) {
  for (size_t j = 0; j < n; ++j) {
    const uint32_t c = code[j];
    const uint32_t q = kSigned ? c & 0x7fu : c;
    const float sub = static_cast<float>(static_cast<int32_t>(q)) * Fmt::kSubStep;
    const float normal = FloatOfBits((q + Fmt::kBias) << Fmt::kDrop);
    const uint32_t small = 0u - static_cast<uint32_t>(q < Fmt::kNormal);
    uint32_t out = BitsOfFloat(FloatOfBits((BitsOfFloat(sub) & small) | (BitsOfFloat(normal) & ~small)) * scale);
    if constexpr (kSigned) out |= (c >> 7) << 31;
    x[j] = FloatOfBits(out);
  }
}

}  // namespace

// A blob of n elements: n codes, padded to 64 bytes, then one fp32 scale per block.
inline size_t Codes8BitBytes(size_t n) { return (n + 63) / 64 * 64; }
inline size_t Blob8BitBytes(size_t n) { return Codes8BitBytes(n) + (n + kBlock8Bit - 1) / kBlock8Bit * 4; }
template <class Byte>  // uint8_t or const uint8_t
inline auto Scales8Bit(Byte* blob, size_t n) {
  using Scale = std::conditional_t<std::is_const_v<Byte>, const float, float>;
  return reinterpret_cast<Scale*>(blob + Codes8BitBytes(n));
}

}  // namespace strata::cpu
