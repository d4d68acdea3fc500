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
  bool amx_bf16 = false;   // AMX tiles with bf16, enabled by the OS (XCR0)
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

// Whether bf16 matrix math is native on this CPU (AVX512-BF16 or AMX-BF16), as the kernels
// see it: a level forced below avx512 (STRATA_FORCE_ISA) hides both, so a test or a
// benchmark can take the path of a CPU without them. `why` (optional) receives a short
// reason for messages ("AVX512-BF16", "no AVX512-BF16 or AMX-BF16 (avx2 CPU)", ...).
bool CpuHasNativeBf16(std::string* why = nullptr);

const char* IsaName(IsaLevel level);
// Parses "scalar" / "avx2" / "avx512"; false on anything else.
bool ParseIsa(const std::string& text, IsaLevel* out);

}  // namespace strata
