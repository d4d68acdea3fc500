// Note [Expert-aware fetching]
// A token of a mixture-of-experts layer uses top_k of its experts, so a micro-batch needs only
// the experts some token of it chose, and the others' bytes need not move at all. The router
// runs first; a sparse layer then tells the ExpertRouting of its BlockContext which experts
// were chosen (Routed) before any of them runs, and the engine brings those to the compute
// device (the block's router, attention and norms came with the block's own fetch; across
// ZeRO-3 ranks, the experts some rank's tokens chose, each rank's pieces broadcast from it).
// In the engine: BlockRouting hears the router, the Gatherer's visit of the block holds a
// RoutedVisit that fetches (src/engine/experts/).
// An expert no token chose runs nothing, so its weights are never read and its gradient is
// zero; the update steps it or skips it as strata.expert_update says (Note [Expert updates]
// in src/engine/experts/expert_state.cc).
#pragma once

#include <cstdint>
#include <span>

namespace strata::model {

class ExpertRouting {
 public:
  virtual ~ExpertRouting() = default;
  // `counts[e]`: the (token, choice) pairs routed to expert e by a sparse layer's router. Every
  // expert with a count must be usable when this returns; a failure is the routing's to keep
  // and report after the block's run (the layer computes on, and the run is void).
  virtual void Routed(std::span<const int64_t> counts) = 0;
};

}  // namespace strata::model
