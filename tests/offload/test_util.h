// Helpers for the store tests: deterministic random bytes and tier options for a temp dir.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "strata/nvme_tier.h"

namespace strata::testing {

inline std::vector<std::byte> RandomBytes(size_t n, uint64_t seed) {
  std::vector<std::byte> v(n);
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x = rng();
    std::memcpy(&v[i], &x, 8);
  }
  for (; i < n; ++i) v[i] = static_cast<std::byte>(rng());
  return v;
}

inline NvmeTierOptions TierOptions(const std::string& dir, uint32_t block = 1u << 20, unsigned qd = 32) {
  NvmeTierOptions o;
  o.dir = dir;
  o.block_size = block;
  o.queue_depth = qd;
  o.verify_checksums = true;  // on by default in tests
  return o;
}

}  // namespace strata::testing
