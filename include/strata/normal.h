// Normally distributed fp32 values for initial weights, from a counter-based generator: value
// i of a stream depends only on the stream's key and i, so a tensor can be drawn in any order,
// on any thread, and every ISA path gives bitwise the same values (Note [Normal draws] in
// kernels/cpu/normal_impl.h). About 4x LibTorch's normal_ on one core (bench/init_bench.cc),
// whose serial mt19937 bound the start-up of multi-billion-parameter models.
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
