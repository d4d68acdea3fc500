// Folder-private: the bit-level helpers that the vectorizable plain-C++ kernels share (the
// normal draws, the 8-bit moments). Internal linkage: each ISA's file compiles its own copy.
#pragma once

#include <cstdint>
#include <cstring>

namespace strata::cpu {
namespace {

// lowbias32 (C. Wellons' hash-prospector): a bijection of 32 bits, two multiplies, low bias.
inline uint32_t Lowbias32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  return x ^ (x >> 16);
}

inline float FloatOfBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint32_t BitsOfFloat(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace
}  // namespace strata::cpu
