// fp32 <-> bf16 casts on the GPU, the device twins of kernels/cpu/cast.cc (the CPU path is
// the oracle the gpu-labelled tests compare with). Vectorised by 4 when aligned; a grid-
// stride loop so one launch covers any n.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cast.h"

namespace strata::cuda {
namespace {

__global__ void CastFp32ToBf16Kernel(const float* __restrict__ src, __nv_bfloat16* __restrict__ dst, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const bool aligned = (reinterpret_cast<uintptr_t>(src) % 16 == 0) && (reinterpret_cast<uintptr_t>(dst) % 8 == 0);
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (aligned) {
    const size_t n4 = n / 4;
    for (size_t j = i; j < n4; j += stride) {
      const float4 v = reinterpret_cast<const float4*>(src)[j];
      __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
      reinterpret_cast<__nv_bfloat162*>(dst)[2 * j] = lo;
      reinterpret_cast<__nv_bfloat162*>(dst)[2 * j + 1] = hi;
    }
    for (size_t j = n4 * 4 + i; j < n; j += stride) dst[j] = __float2bfloat16_rn(src[j]);
  } else {
    for (size_t j = i; j < n; j += stride) dst[j] = __float2bfloat16_rn(src[j]);
  }
}

__global__ void CastBf16ToFp32Kernel(const __nv_bfloat16* __restrict__ src, float* __restrict__ dst, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += stride)
    dst[j] = __bfloat162float(src[j]);
}

unsigned GridFor(size_t n, unsigned block) {
  const size_t blocks = (n / 4 + block - 1) / block;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 ? 65535 : blocks));
}

}  // namespace

int LaunchCastFp32ToBf16(const float* src, uint16_t* dst, size_t n, void* stream) {
  if (n == 0) return 0;
  constexpr unsigned kBlock = 256;
  CastFp32ToBf16Kernel<<<GridFor(n, kBlock), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(
      src, reinterpret_cast<__nv_bfloat16*>(dst), n);
  return static_cast<int>(cudaGetLastError());
}

int LaunchCastBf16ToFp32(const uint16_t* src, float* dst, size_t n, void* stream) {
  if (n == 0) return 0;
  constexpr unsigned kBlock = 256;
  CastBf16ToFp32Kernel<<<GridFor(n, kBlock), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<const __nv_bfloat16*>(src), dst, n);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace strata::cuda
