#include "src/estimate/longest_sequence.h"

#include <algorithm>

#include <fmt/format.h>

namespace strata {

LongestSequence FindLongestSequence(const FitsAtLength& fits_at, int64_t step) {
  // In units of `step` tokens: the lengths a run can take (a sequence group's shards are equal).
  step = std::max<int64_t>(1, step);
  const auto fits = [&](int64_t units, std::string* why) { return fits_at(units * step, why); };
  const int64_t first = (kShortestSequence + step - 1) / step, last = kLongestSequenceTried / step;
  LongestSequence best;
  std::string bound;
  std::optional<MemoryEstimate> e = fits(first, &best.bound);
  if (!e) return best;
  best = {first * step, *e, ""};
  int64_t lo = first, hi = 0;  // lo fits; hi does not (0: none found yet)
  while (hi == 0 && lo < last) {
    const int64_t next = std::min(2 * lo, last);
    if (auto at = fits(next, &bound)) {
      lo = next;
      best = {lo * step, *at, ""};
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
    if (auto at = fits(mid, &bound)) {
      lo = mid;
      best.tokens = mid * step;
      best.estimate = *at;
    } else {
      hi = mid;
      best.bound = bound;
    }
  }
  return best;
}

}  // namespace strata
