// FlatGroup arithmetic: a block's parameters laid end to end in one flat buffer, padded so
// that it splits into `world` equal shards, each a multiple of kShardAlign elements (64
// elements: a cache line of fp32 and a whole number of SIMD vectors). Pure arithmetic,
// no memory.
//
//   flat:  [ p0 | p1 | p2 | pad ]          padded = world * shard
//   ranks: [ r0 shard | r1 shard | ... ]   rank r holds [r*shard, (r+1)*shard)
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace strata {

inline constexpr int64_t kShardAlign = 64;

struct ShardLayout {
  int64_t numel = 0;   // real elements
  int64_t padded = 0;  // world * shard >= numel
  int64_t shard = 0;   // elements per rank
  int world = 1;
  int rank = 0;
  int64_t begin() const { return shard * rank; }
  int64_t end() const { return begin() + shard; }
  // Real (non-padding) elements in this rank's shard.
  int64_t real_in_shard() const { return std::clamp<int64_t>(numel - begin(), 0, shard); }
};

inline ShardLayout MakeShardLayout(int64_t numel, int world, int rank) {
  ShardLayout l;
  l.numel = numel;
  l.world = world;
  l.rank = rank;
  const int64_t per = (numel + world - 1) / world;
  l.shard = std::max<int64_t>(kShardAlign, (per + kShardAlign - 1) / kShardAlign * kShardAlign);
  l.padded = l.shard * world;
  return l;
}

// Splits [0, n) into pieces of at most max_elems (multiples of kShardAlign except the last):
// the optimizer's sub-groups of one shard.
inline std::vector<std::pair<int64_t, int64_t>> SplitRange(int64_t n, int64_t max_elems) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const int64_t step = std::max<int64_t>(kShardAlign, max_elems / kShardAlign * kShardAlign);
  for (int64_t b = 0; b < n; b += step) out.push_back({b, std::min(n, b + step)});
  return out;
}

}  // namespace strata
