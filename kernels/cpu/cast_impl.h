// Folder-private: per-ISA entry points of the cast kernels (cast_avx512.cc is compiled with
// AVX-512 flags; call only when ActiveIsa() allows it).
#pragma once

#include <cstddef>
#include <cstdint>

namespace strata::cpu {

void CastFp32ToBf16Avx512(const float* src, uint16_t* dst, size_t n);

}  // namespace strata::cpu
