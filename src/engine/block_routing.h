// Folder-private: what a sparse layer's routing does in the engine (Note [Expert-aware
// fetching]): recorded for the optimizer, and the chosen experts fetched when the block's own
// fetch left them out.
#pragma once

#include <optional>

#include "src/engine/engine_impl.h"
#include "src/model/expert_routing.h"

namespace strata {

// Armed on the compute thread while block b runs (its forward, or its recomputation in the
// backward); nothing for a dense block. `train`: the routing counts for the step's update.
class BlockRouting final : public model::ExpertRouting {
 public:
  BlockRouting(Engine::Impl& m, int b, bool train);
  void Routed(std::span<const int64_t> counts) override;

 private:
  Engine::Impl& m_;
  int b_;
  bool train_;
  std::optional<model::ExpertRoutingScope> scope_;
};

}  // namespace strata
