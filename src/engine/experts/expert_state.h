// Folder-private: a mixture of experts' state in the engine (Note [Expert-aware fetching],
// Note [Expert updates]), per sparse block and per expert: whether some token of the running
// step chose it, and the Adam steps applied to it. The routing writes it (BlockRouting), the
// optimizer joins it over the ranks before an update (CountSteps), the update window reads
// each expert's step in that update, and checkpoints carry the counts.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "src/config/train_config.h"
#include "src/engine/shard_plan.h"
#include "strata/communicator.h"
#include "strata/status.h"

namespace strata {

class ExpertState {
 public:
  using Steps = std::vector<std::vector<int64_t>>;  // per block (empty for a dense block), per expert

  // One entry per block of `plan` and per expert of a sparse block.
  void Allocate(const ShardPlan& plan);
  bool any() const { return !routed_.empty(); }

  // A training step begins: no expert chosen yet.
  void BeginStep();
  // A training pass through block b's sparse layer chose these experts (counts per expert).
  void Routed(int b, std::span<const int64_t> counts);

  // Before an update, the run's `run_steps`-th: with strata.expert_update "all" every expert
  // takes the run's count; with "chosen" the step's routing is joined over the ranks (a
  // collective: every rank calls it), each chosen expert's count advances, and the update's
  // steps are recorded for UpdateStep.
  Status CountSteps(ExpertUpdate mode, int64_t run_steps, Communicator& comm);
  // The update launched last (the optimizer thread reads it while it runs): expert e of block
  // b's Adam step in it, 0 where it is not updated; -1 where every expert takes the run's step.
  int64_t UpdateStep(int b, int e) const { return update_steps_ ? (*update_steps_)[b][e] : -1; }

  // Checkpoints: each expert's count, whether a checkpoint's have this model's shape (or are
  // empty), and the counts restored (`given` empty: every expert takes `run_steps`).
  const Steps& steps() const { return steps_; }
  bool Fits(const Steps& given) const;
  void Restore(const Steps& given, int64_t run_steps);

 private:
  std::vector<std::vector<uint8_t>> routed_;
  Steps steps_;
  std::shared_ptr<const Steps> update_steps_;  // null: every expert takes the run's step
};

}  // namespace strata
