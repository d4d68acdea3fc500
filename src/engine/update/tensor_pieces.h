// Folder-private: a block's parameter tensors as LAMB sees them (Note [LAMB trust ratio] in
// strata/cpu_adam.h), and a sub-group cut along them. Torch-free.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "src/engine/shard_plan.h"

namespace strata {

// The flat ranges [begin, end) of a block's parameter tensors, sorted and disjoint.
using TensorRanges = std::vector<std::pair<int64_t, int64_t>>;

// A block's tensors and the model parameter each is (part of): `group[t]` in [0, count). Where
// transformers fuses tensors Strata keeps apart (model::HfParameterOf), they share a group.
struct TensorGroups {
  TensorRanges ranges;
  std::vector<int> group;
  int count = 0;
};

// Calls fn(t, lo, hi) for each piece of `sub` in order, lo and hi relative to sub.begin: t is
// the index of the tensor in `tensors` it lies in, or -1 for elements of no tensor (padding).
template <class Fn>
void ForEachTensorPiece(const TensorRanges& tensors, ElementRange sub, Fn&& fn) {
  const int64_t end = sub.begin + sub.len;
  int64_t at = sub.begin;
  auto first = std::upper_bound(tensors.begin(), tensors.end(), at,
                                [](int64_t x, const std::pair<int64_t, int64_t>& r) { return x < r.second; });
  for (auto it = first; it != tensors.end() && it->first < end && at < end; ++it) {
    if (it->first > at) {
      fn(-1, at - sub.begin, it->first - sub.begin);
      at = it->first;
    }
    const int64_t stop = std::min(it->second, end);
    fn(static_cast<int>(it - tensors.begin()), at - sub.begin, stop - sub.begin);
    at = stop;
  }
  if (at < end) fn(-1, at - sub.begin, end - sub.begin);
}

}  // namespace strata
