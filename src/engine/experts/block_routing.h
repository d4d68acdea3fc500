// Folder-private: what a sparse layer's routing does in the engine (Note [Expert-aware
// fetching]): recorded for the optimizer, and the chosen experts fetched when the block's own
// fetch left them out.
#pragma once

#include <span>

#include "src/engine/experts/expert_state.h"
#include "src/engine/step_stats.h"
#include "src/model/expert_routing.h"
#include "strata/status.h"

namespace strata {

// Brings the experts a sparse layer chose to the compute device (the pass's Gatherer).
class ExpertFetcher {
 public:
  virtual ~ExpertFetcher() = default;
  // Block `block`'s sparse layer chose these experts (counts per expert): those not fetched
  // yet are brought in, the compute waiting for them.
  virtual Status FetchExperts(int block, std::span<const int64_t> counts) = 0;
};

// Block b's routing report while it runs (its forward, or its recomputation in the backward),
// handed to its layers in the BlockContext (`context()`: null for a dense block). `train`: the
// routing counts for the step's update (ExpertState::Routed); `counts`: the step's routed
// experts; `fetch`: the pass's Gatherer, which fetches the chosen experts.
class BlockRouting final : public model::ExpertRouting {
 public:
  BlockRouting(int b, int experts, bool train, ExpertState& state, StepStats& counts, ExpertFetcher& fetch);
  void Routed(std::span<const int64_t> counts) override;
  // The first fetch that failed: the block's run computed on stale experts and is void.
  const Status& status() const { return status_; }
  // What BlockContext::routing takes: this, or null for a dense block.
  model::ExpertRouting* context() { return sparse_ ? this : nullptr; }

 private:
  int b_;
  bool train_;
  ExpertState& state_;
  StepStats& counts_;
  ExpertFetcher& fetch_;
  bool sparse_;
  Status status_;
};

}  // namespace strata
