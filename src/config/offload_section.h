// Folder-private: zero_optimization's offload_param and offload_optimizer sections (and
// DeepSpeed's deprecated flat cpu_offload keys), ParseTrainConfig's part for where the state
// lives. DeepSpeed keys Strata has no use for are accepted with a note saying why.
#pragma once

#include "src/config/json_reader.h"
#include "src/config/train_config.h"

namespace strata {

// Reads both sections of `zero` into config->offload_param / offload_optimizer.
Status ParseOffloadSections(JsonReader& zero, TrainConfig* config);

}  // namespace strata
