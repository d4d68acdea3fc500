// OptimizerRule: one row per optimizer the CPU update runs (Note [Optimizer rules]). It says
// which states a sub-group keeps beside its master and which kernel rule updates them;
// StateFormat, the update window, the ledger, the checkpoints and the estimator ask it and
// loop over what it keeps, so none of them names an optimizer.
//
// Note [Optimizer rules]
// Every optimizer here is element-wise over a sub-group, with at most two states besides the
// master, held in the two moment slots (TensorRole kAdamM and kAdamV, checkpoint names
// "adam_m" and "adam_v" whatever the optimizer: the manifest's "optimizer" says whose they
// are, and a resume under another optimizer is refused). Adding one is: its kernel rule
// (strata/cpu_adam.h, Note [Update rules]), its row below, its config entry
// (src/config/optimizer_section.cc) and its tests. LAMB's update needs each tensor's norms
// first (`per_tensor`): a norm pass over the same states before the update (Note [LAMB trust
// ratio]). Muon's update of a matrix needs the whole matrix (`whole_matrices`): a pass over the
// states assembles and orthogonalises each before the update (Note [Muon] in
// update/muon_matrices.h); its other parameters take AdamW in the same sub-groups.
#pragma once

#include "src/config/train_config.h"
#include "src/engine/tensor_key.h"
#include "strata/cpu_adam.h"

namespace strata {

struct OptimizerRule {
  OptimizerKind kind;
  const char* name;       // "adam", "lion", "adagrad", "lamb", "muon": what checkpoints record (manifest "optimizer")
  const char* title;      // as the config names its type: "AdamW", "Lion", "Adagrad", "Lamb", "Muon"
  UpdateRule kernel;      // the CPU kernel's rule
  bool keeps_m, keeps_v;  // the moment slots it keeps
  bool compact_moments;   // strata.adam_states "bf16" and "8bit" apply to it
  const char* m_row;      // the memory table's rows for its states
  const char* v_row;
  // Its update scales each tensor by a ratio of whole-tensor norms (LAMB): the step runs a norm
  // pass over the states first (Note [LAMB trust ratio], update/trust_ratios.h).
  bool per_tensor = false;
  // Its update of a matrix needs the whole matrix (Muon): the step assembles and orthogonalises
  // each first (Note [Muon]).
  bool whole_matrices = false;

  // The step runs a pass over every state before the update (no state can be read early).
  bool pre_pass() const { return per_tensor || whole_matrices; }
  bool Keeps(TensorRole moment) const { return moment == TensorRole::kAdamM ? keeps_m : keeps_v; }
  int moments() const { return keeps_m + keeps_v; }
};

const OptimizerRule& RuleOf(OptimizerKind kind);
// The row whose `name` is `name` ("adam", "lion", "adagrad"); null for any other.
const OptimizerRule* RuleNamed(const std::string& name);

}  // namespace strata
