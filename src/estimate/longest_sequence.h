// `strata estimate --max-seq`: the longest sequence a config trains on a machine, its other
// settings as written (micro-batch, tiers; its "auto"s settled at each length as `train`
// settles them, which the caller's FitsAt does).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "src/estimate/estimator.h"
#include "src/model/model_config.h"

namespace strata {

struct LongestSequence {
  int64_t tokens = 0;       // 0: not even kShortestSequence fits
  MemoryEstimate estimate;  // at that length
  std::string bound;        // why the next length (one step more) does not fit; empty: none failed
};

// The longest length tried is the longest Strata accepts at all (strata.model.seq_len's limit).
inline constexpr int64_t kShortestSequence = 128, kLongestSequenceTried = model::ModelLimits::kSeqLen;

// The estimate of the run at `tokens` per sequence when it fits, else nullopt with why in *bound.
using FitsAtLength = std::function<std::optional<MemoryEstimate>(int64_t tokens, std::string* bound)>;

// Fits are monotone in the length: doubles from kShortestSequence (up to kLongestSequenceTried),
// then bisects to the token, or with `step` > 1 to a multiple of it (sequence_parallel_size:
// only those split into equal shards). Where even kLongestSequenceTried fits, `bound` says it is
// the limit; else why `step` tokens more do not fit.
LongestSequence FindLongestSequence(const FitsAtLength& fits_at, int64_t step = 1);

}  // namespace strata
