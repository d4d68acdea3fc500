// A 64-bit integer carried by the float collectives (the communicators reduce, gather and
// broadcast floats only): four 16-bit pieces, each a float exactly, whatever the collective
// does with them. For tokens, checksums and byte counts that every rank must see whole.
#pragma once

#include <cstdint>

namespace strata {

inline constexpr int kFloatPieces = 4;

inline void ToFloatPieces(uint64_t v, float* pieces) {
  for (int i = 0; i < kFloatPieces; ++i) pieces[i] = static_cast<float>((v >> (16 * i)) & 0xFFFF);
}

inline uint64_t FromFloatPieces(const float* pieces) {
  uint64_t v = 0;
  for (int i = 0; i < kFloatPieces; ++i) v |= static_cast<uint64_t>(pieces[i]) << (16 * i);
  return v;
}

}  // namespace strata
