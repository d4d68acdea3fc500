// Host memory bandwidth as the store's copies see it: memcpy between two buffers split over
// threads, and xxh3 (the tier's checksum) over a buffer on one thread.
#pragma once

#include <cstddef>

namespace strata::bench {

// memcpy of `bytes` from src to dst, split into 4 KiB-aligned chunks over `threads` OpenMP
// threads; the best of `reps` repetitions, in GB/s of bytes copied.
double MemcpyGbps(std::byte* dst, const std::byte* src, size_t bytes, int threads, int reps = 8);

// xxh3-64 over `bytes` on the calling thread; the best of a few, GB/s.
double ChecksumGbps(const std::byte* data, size_t bytes);

}  // namespace strata::bench
