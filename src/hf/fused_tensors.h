// Folder-private: the HF side of the projections a family fuses (Phi-3's qkv_proj and
// gate_up_proj, model::FusedRowsOf). The consolidator yields Strata's parameters one by one,
// under their unfused HF names; what is written as a Hugging Face folder or file joins each
// group into its fused tensor (rows stacked in the family's order), placed where its first
// part was. Torch-free.
#pragma once

#include <vector>

#include "src/hf/consolidate.h"
#include "src/model/model_config.h"

namespace strata::ckpt {

// Each complete group among `tensors` joined; a group missing a part is an error (a
// checkpoint that lost a tensor), naming it.
Status FuseHfTensors(const model::ModelConfig& config, std::vector<ExportedTensor>* tensors);
// The same for the planned names and sizes (shards are planned before any tensor is read).
Status FuseHfPlan(const model::ModelConfig& config, std::vector<PlannedTensor>* plan);

}  // namespace strata::ckpt
