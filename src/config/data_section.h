// Folder-private: the "strata.data" section of a config (ParseTrainConfig's part for the
// training data): the token file and its format, the loss mask, the held-out split or file,
// epochs, packing. Both directions, so that `config check` prints every key as it is read.
#pragma once

#include "src/config/json_reader.h"
#include "src/config/train_config.h"

namespace strata {

// Reads strata.data from `strata` into config->data (its seed is config->seed); the way back
// is DataConfigJson (train_config.h).
Status ParseDataSection(JsonReader& strata, TrainConfig* config);

}  // namespace strata
