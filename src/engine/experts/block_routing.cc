// BlockRouting (block_routing.h).
#include "src/engine/experts/block_routing.h"

namespace strata {

BlockRouting::BlockRouting(int b, int experts, bool train, ExpertState& state, StepStats& counts, ExpertFetcher& fetch)
    : b_(b), train_(train), state_(state), counts_(counts), fetch_(fetch), sparse_(experts > 0) {}

void BlockRouting::Routed(std::span<const int64_t> counts) {
  for (int64_t c : counts) counts_.experts_routed += c > 0;
  if (train_) state_.Routed(b_, counts);
  // A failure is kept, not thrown through LibTorch: the layer goes on with what the buffer
  // holds, and the engine reports it once the block's run returns.
  if (status_.ok()) status_ = fetch_.FetchExperts(b_, counts);
}

}  // namespace strata
