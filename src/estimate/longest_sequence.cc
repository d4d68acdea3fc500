#include "src/estimate/longest_sequence.h"

namespace strata {

LongestSequence FindLongestSequence(const FitsAtLength& fits_at) {
  LongestSequence best;
  std::string bound;
  std::optional<MemoryEstimate> e = fits_at(kShortestSequence, &best.bound);
  if (!e) return best;
  best = {kShortestSequence, *e, ""};
  int64_t lo = kShortestSequence, hi = 0;  // lo fits; hi does not (0: none found yet)
  while (hi == 0 && lo < kLongestSequenceTried) {
    if (auto at = fits_at(2 * lo, &bound)) {
      lo *= 2;
      best = {lo, *at, ""};
    } else {
      hi = 2 * lo;
      best.bound = bound;
    }
  }
  while (hi - lo > 1 && hi != 0) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (auto at = fits_at(mid, &bound)) {
      lo = mid;
      best.tokens = mid;
      best.estimate = *at;
    } else {
      hi = mid;
      best.bound = bound;
    }
  }
  return best;
}

}  // namespace strata
