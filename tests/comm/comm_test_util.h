// Test helpers for the communicators: deterministic per-rank inputs and a serial reference
// that reduces in a given rank order, accumulating in fp32 like the implementations do.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "strata/cast.h"
#include "strata/communicator.h"
#include "strata/dtype.h"

namespace strata::testing {

using Bytes = std::vector<uint8_t>;

inline float Widen(const Bytes& b, DType dt, size_t i) {
  if (dt == DType::kF32) {
    float f;
    std::memcpy(&f, b.data() + i * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, b.data() + i * 2, 2);
  return dt == DType::kBF16 ? Bf16ToFp32(h) : Fp16ToFp32(h);
}

inline void Narrow(float v, DType dt, Bytes& b, size_t i) {
  if (dt == DType::kF32) {
    std::memcpy(b.data() + i * 4, &v, 4);
    return;
  }
  uint16_t h = dt == DType::kBF16 ? Fp32ToBf16(v) : Fp32ToFp16(v);
  std::memcpy(b.data() + i * 2, &h, 2);
}

// `count` values in [-1, 1) that differ per rank, element and seed (a cheap integer hash).
inline Bytes MakeInput(int rank, size_t count, DType dt, uint32_t seed = 1) {
  Bytes b(count * DTypeSize(dt));
  for (size_t i = 0; i < count; ++i) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ (static_cast<uint32_t>(rank) + 1) * 40503u ^ seed * 97u;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    Narrow(static_cast<float>(x >> 8) / static_cast<float>(1u << 23) - 1.0f, dt, b, i);
  }
  return b;
}

// out[i] = reduce of in[order(i)[0..n)][offset + i], left to right, in fp32, rounded once.
// `order(i)` returns the rank order for element i (rank order 0..n-1 for the local
// communicator, the ring order for the TCP one).
inline Bytes ReduceReference(const std::vector<Bytes>& in, size_t offset, size_t count, DType dt, ReduceOp op,
                             const std::function<const std::vector<int>&(size_t)>& order) {
  Bytes out(count * DTypeSize(dt));
  for (size_t i = 0; i < count; ++i) {
    const std::vector<int>& ranks = order(i);
    float acc = Widen(in[static_cast<size_t>(ranks[0])], dt, offset + i);
    for (size_t k = 1; k < ranks.size(); ++k) {
      float x = Widen(in[static_cast<size_t>(ranks[k])], dt, offset + i);
      acc = op == ReduceOp::kSum ? acc + x : (acc >= x ? acc : x);
    }
    Narrow(acc, dt, out, i);
  }
  return out;
}

inline std::vector<int> RankOrder(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) v[static_cast<size_t>(r)] = r;
  return v;
}

// The TCP ring's order for chunk c (Note [Ring order makes reductions deterministic]):
// c+1, c+2, ..., c (mod n).
inline std::vector<int> RingOrder(int n, int chunk) {
  std::vector<int> v;
  for (int k = 1; k <= n; ++k) v.push_back((chunk + k) % n);
  return v;
}

}  // namespace strata::testing
