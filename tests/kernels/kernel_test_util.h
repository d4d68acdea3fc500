// Helpers the kernel tests share (they compile as one unit, so a helper lives here once).
#pragma once

#include <bit>
#include <cstdint>

#include "strata/cpu_adam.h"

namespace strata::kernel_test {

// The float whose IEEE bits are u: to name exact ties, subnormals and NaNs.
inline float FloatFromBits(uint32_t u) { return std::bit_cast<float>(u); }
// x's IEEE bits: to compare floats bit for bit (NaN payloads and -0 included).
inline uint32_t BitsOfFloat(float x) { return std::bit_cast<uint32_t>(x); }

// A step past the first, with weight decay, so that bias correction and decay both count.
inline AdamHyperParams StepFive() { return {.lr = 1e-2, .weight_decay = 0.1, .step = 5}; }

}  // namespace strata::kernel_test
