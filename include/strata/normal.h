// Normally distributed fp32 values for initial weights, from a counter-based generator: value
// i of a stream depends only on the stream's key and i, so a tensor can be drawn in any order,
// on any thread, and every ISA path gives bitwise the same values (Note [Normal draws] in
// kernels/cpu/normal_impl.h). `strata bench init`: 3.2x LibTorch's normal_ (serial mt19937,
// which bound the start-up of multi-billion-parameter models) on one core with AVX-512, 1.9x
// with AVX2.
#pragma once

#include <cstdint>
#include <span>

namespace strata {

// out[i] = mean + std * z_i, z_i ~ N(0, 1), for the stream `key`. Values come in chunks of
// 32 (16 pairs of a Box-Muller transform: 16 cosines, then their 16 sines), so out[i] is the
// same whatever out.size() is. Runs on the calling thread; at most 2^33 values per stream.
void FillNormal(std::span<float> out, float mean, float std, uint64_t key);

// A key for stream `index` under `seed` (splitmix64 of both): distinct streams per
// (seed, index), decorrelated from their neighbours.
uint64_t NormalStreamKey(uint64_t seed, uint64_t index);

}  // namespace strata
