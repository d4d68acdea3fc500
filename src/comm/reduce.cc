#include "src/comm/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>

#include "strata/cast.h"

namespace strata::comm {
namespace {

// Widening is done in blocks through a small stack buffer so the add loop vectorises.
constexpr size_t kBlock = 1024;

// max that propagates NaN from either side, so a NaN anywhere reaches every rank.
inline float MaxNan(float a, float b) { return (std::isnan(a) || a >= b) ? a : b; }

void Combine(float* acc, const float* x, size_t n, ReduceOp op) {
  if (op == ReduceOp::kSum) {
    for (size_t i = 0; i < n; ++i) acc[i] += x[i];
  } else {
    for (size_t i = 0; i < n; ++i) acc[i] = MaxNan(acc[i], x[i]);
  }
}

}  // namespace

void LoadF32(const void* src, DType dtype, size_t n, float* dst) {
  const auto* h = static_cast<const uint16_t*>(src);
  switch (dtype) {
    case DType::kF32: std::memcpy(dst, src, n * sizeof(float)); return;
    case DType::kBF16: CastBf16ToFp32({h, n}, {dst, n}); return;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) dst[i] = Fp16ToFp32(h[i]);
      return;
  }
}

void Accumulate(float* acc, const void* src, DType dtype, size_t n, ReduceOp op) {
  if (dtype == DType::kF32) {
    Combine(acc, static_cast<const float*>(src), n, op);
    return;
  }
  float wide[kBlock];
  const auto* h = static_cast<const uint16_t*>(src);
  for (size_t i = 0; i < n; i += kBlock) {
    size_t m = std::min(kBlock, n - i);
    LoadF32(h + i, dtype, m, wide);
    Combine(acc + i, wide, m, op);
  }
}

void StoreF32(const float* acc, DType dtype, size_t n, void* dst) {
  auto* h = static_cast<uint16_t*>(dst);
  switch (dtype) {
    case DType::kF32: std::memcpy(dst, acc, n * sizeof(float)); return;
    case DType::kBF16: CastFp32ToBf16({acc, n}, {h, n}); return;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) h[i] = Fp32ToFp16(acc[i]);
      return;
  }
}

}  // namespace strata::comm
