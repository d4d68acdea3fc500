// ExpertState (expert_state.h).
#include "src/engine/experts/expert_state.h"

#include <algorithm>

namespace strata {

void ExpertState::Allocate(const ShardPlan& plan) {
  routed_.clear();
  steps_.clear();
  for (const BlockPlan& bp : plan.blocks) {
    routed_.emplace_back(bp.experts.count, 0);
    steps_.emplace_back(bp.experts.count, 0);
  }
}

void ExpertState::BeginStep() {
  for (auto& routed : routed_) std::fill(routed.begin(), routed.end(), 0);
}

void ExpertState::Routed(int b, std::span<const int64_t> counts) {
  std::vector<uint8_t>& routed = routed_[b];
  for (size_t e = 0; e < counts.size() && e < routed.size(); ++e) routed[e] |= counts[e] > 0 ? 1 : 0;
}

// Note [Expert updates]
// transformers 5 stores a layer's experts as one fused parameter ([E, ...] tensors), so
// torch.optim.AdamW steps every expert every step: an expert no token chose has a zero
// gradient (its slice of the fused gradient), and its moments decay, its weights decay and move
// by their momentum, under the one step count of the tensor. strata.expert_update "all" (the
// default) does the same: an unchosen expert's gradient is zero in the accumulators (it ran
// nothing, so the flattening wrote zeros), its states are read and written as any other, and
// every expert's count is the run's. "chosen" skips such an expert, as AdamW skips a
// per-expert parameter whose gradient is None (transformers 4's modules): its states stay
// (not written back), and each expert keeps a step count of its own for the bias correction.
// An expert some token of some rank chose in the step has a gradient; with "chosen" it takes
// an Adam step of its own count and the others are skipped.
Status ExpertState::CountSteps(ExpertUpdate mode, int64_t run_steps, Communicator& comm) {
  if (mode == ExpertUpdate::kAll) {  // every expert, the run's count: nothing to skip
    for (auto& block : steps_) std::fill(block.begin(), block.end(), run_steps);
    update_steps_ = nullptr;
    return Status();
  }
  std::vector<float> routed;
  for (const auto& block : routed_)
    for (uint8_t r : block) routed.push_back(r);
  if (comm.world_size() > 1 && !routed.empty())
    STRATA_RETURN_IF_ERROR(comm.AllReduce(routed.data(), routed.size(), DType::kF32, ReduceOp::kSum));
  auto steps = std::make_shared<Steps>(steps_.size());
  size_t at = 0;
  for (size_t b = 0; b < steps_.size(); ++b) {
    for (int64_t& count : steps_[b]) {
      const bool chosen = routed[at++] > 0;
      count += chosen;
      (*steps)[b].push_back(chosen ? count : 0);
    }
  }
  update_steps_ = std::move(steps);
  return Status();
}

bool ExpertState::Fits(const Steps& given) const {
  if (given.empty()) return true;
  if (given.size() != steps_.size()) return false;
  for (size_t b = 0; b < steps_.size(); ++b)
    if (given[b].size() != steps_[b].size()) return false;
  return true;
}

void ExpertState::Restore(const Steps& given, int64_t run_steps) {
  for (size_t b = 0; b < steps_.size(); ++b)  // (the caller checked the shape: Fits)
    for (size_t e = 0; e < steps_[b].size(); ++e) steps_[b][e] = given.empty() ? run_steps : given.at(b).at(e);
}

}  // namespace strata
