// BlockRouting (block_routing.h).
#include "src/engine/block_routing.h"

#include <stdexcept>

namespace strata {

BlockRouting::BlockRouting(Engine::Impl& m, int b, bool train) : m_(m), b_(b), train_(train) {
  if (m.plan.blocks[b].experts.count > 0) scope_.emplace(this);
}

void BlockRouting::Routed(std::span<const int64_t> counts) {
  for (int64_t c : counts) m_.step_counts.experts_routed += c > 0;
  if (train_) {
    std::vector<uint8_t>& routed = m_.experts.routed[b_];
    for (size_t e = 0; e < counts.size() && e < routed.size(); ++e) routed[e] |= counts[e] > 0 ? 1 : 0;
  }
  if (!m_.gatherer) return;
  if (Status s = m_.gatherer->FetchExperts(b_, counts); !s.ok()) throw std::runtime_error(s.ToString());
}

}  // namespace strata
