// The CPU instruction-set level that kernels dispatch on, read once from cpuid at run time
// (the binary is built for plain x86-64; per-ISA files carry their own -m flags).
// STRATA_FORCE_ISA=scalar|avx2|avx512 forces a lower level, for tests; asking for a level
// the CPU lacks is reported and the detected level is kept.
#pragma once

#include <string>

namespace strata {

enum class IsaLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

struct CpuFeatures {
  bool avx2 = false;       // with FMA and F16C
  bool avx512 = false;     // F, BW, VL, DQ
  bool avx512_bf16 = false;
  bool avx512_fp16 = false;
};

// What the CPU offers (cached; thread-safe).
const CpuFeatures& DetectCpuFeatures();
// The highest level the CPU supports.
IsaLevel DetectedIsa();
// The level kernels use: DetectedIsa(), lowered by STRATA_FORCE_ISA or SetForcedIsa().
IsaLevel ActiveIsa();
// Tests: force a level for this process (clamped to what the CPU has). Not thread-safe
// with concurrent kernel calls.
void SetForcedIsa(IsaLevel level);
void ClearForcedIsa();

const char* IsaName(IsaLevel level);
// Parses "scalar" / "avx2" / "avx512"; false on anything else.
bool ParseIsa(const std::string& text, IsaLevel* out);

}  // namespace strata
