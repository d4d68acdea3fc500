// Launchers for the CUDA cast kernels. Toolkit-free header: streams are passed as void*
// (a cudaStream_t), so any file may include it. Returns 0 on success or the cudaError_t.
#pragma once

#include <cstddef>
#include <cstdint>

namespace strata::cuda {

// dst[i] = bf16(src[i]) with round-to-nearest-even, n elements, asynchronously on `stream`.
// Both pointers are device (or managed) memory; any alignment.
int LaunchCastFp32ToBf16(const float* src, uint16_t* dst, size_t n, void* stream);
// dst[i] = fp32(src[i]) (exact).
int LaunchCastBf16ToFp32(const uint16_t* src, float* dst, size_t n, void* stream);

}  // namespace strata::cuda
