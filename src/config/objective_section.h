// Folder-private: strata.objective, what a step's loss is: "language_model" (the default: the
// mean cross-entropy of the trained targets) or DPO over preference pairs (Note [DPO]),
//   "objective": "dpo"  or  {"type": "dpo", "beta": 0.1, "loss_type": "sigmoid",
//                            "label_smoothing": 0.0}
// with TRL's DPOConfig defaults and meanings ("robust" is TRL's label-smoothed loss). DPO reads
// preference pairs (scripts/prepare_data.py writes them from prompt/chosen/rejected records):
// whole examples, one a row (strata.data.packing "none", long_examples "truncate").
#pragma once

#include "src/config/json_reader.h"
#include "src/config/train_config.h"

namespace strata {

// Reads strata.objective and checks what strata.data must be for it (after the data section);
// the error names the key.
Status ParseObjective(JsonReader& strata, TrainConfig* config);
const char* ObjectiveName(Objective o);

}  // namespace strata
