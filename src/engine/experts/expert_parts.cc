// A sparse layer's working weights in parts (expert_parts.h).
#include "src/engine/experts/expert_parts.h"

#include <algorithm>

namespace strata {

std::vector<WorkingPart> PartsOfWorking(const ShardPlan& plan, int b) {
  std::vector<WorkingPart> parts;
  if (!plan.FetchesRouted(b)) return parts;
  const BlockPlan& bp = plan.blocks[b];
  const int64_t lo = bp.working.begin, hi = lo + bp.working_tensor_len();
  auto add = [&](int64_t from, int64_t to, int expert) {  // flat elements, clipped to the tensor
    from = std::max(from, lo);
    to = std::min(to, hi);
    if (from < to) parts.push_back({from - lo, to - from, expert});
  };
  const model::ExpertSpan& x = bp.experts;
  add(lo, x.begin, -1);
  for (int64_t e = 0; e < x.count; ++e) add(x.begin + e * x.numel, x.begin + (e + 1) * x.numel, static_cast<int>(e));
  add(x.end(), hi, -1);
  return parts;
}

}  // namespace strata
