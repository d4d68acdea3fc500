// Element types that cross folder boundaries (communication, store views, casts).
#pragma once

#include <cstddef>

namespace strata {

enum class DType { kF32, kBF16, kF16 };

constexpr size_t DTypeSize(DType t) { return t == DType::kF32 ? 4 : 2; }
constexpr const char* DTypeName(DType t) { return t == DType::kF32 ? "fp32" : t == DType::kBF16 ? "bf16" : "fp16"; }

}  // namespace strata
