// BlockRouting (block_routing.h).
#include "src/engine/experts/block_routing.h"

#include <stdexcept>

namespace strata {

BlockRouting::BlockRouting(int b, int experts, bool train, ExpertState& state, StepStats& counts, ExpertFetcher& fetch)
    : b_(b), train_(train), state_(state), counts_(counts), fetch_(fetch), sparse_(experts > 0) {}

void BlockRouting::Routed(std::span<const int64_t> counts) {
  for (int64_t c : counts) counts_.experts_routed += c > 0;
  if (train_) state_.Routed(b_, counts);
  if (Status s = fetch_.FetchExperts(b_, counts); !s.ok()) throw std::runtime_error(s.ToString());
}

}  // namespace strata
