#include "src/estimate/longest_sequence.h"

#include <algorithm>

#include <fmt/format.h>

namespace strata {

LongestSequence FindLongestSequence(const FitsAtLength& fits_at) {
  LongestSequence best;
  std::string bound;
  std::optional<MemoryEstimate> e = fits_at(kShortestSequence, &best.bound);
  if (!e) return best;
  best = {kShortestSequence, *e, ""};
  int64_t lo = kShortestSequence, hi = 0;  // lo fits; hi does not (0: none found yet)
  while (hi == 0 && lo < kLongestSequenceTried) {
    const int64_t next = std::min(2 * lo, kLongestSequenceTried);
    if (auto at = fits_at(next, &bound)) {
      lo = next;
      best = {lo, *at, ""};
    } else {
      hi = next;
      best.bound = bound;
    }
  }
  if (hi == 0)
    best.bound = fmt::format("{} tokens is the longest sequence Strata accepts (strata.model.seq_len)",
                             kLongestSequenceTried);
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
