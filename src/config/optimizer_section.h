// Folder-private: the optimizer and scheduler sections, ParseTrainConfig's part for what is
// trained with. Absent keys mean what DeepSpeed 0.19.8 makes of them, each default applied
// noted in config->notes.
#pragma once

#include "src/config/json_reader.h"
#include "src/config/train_config.h"

namespace strata {

// "optimizer": Adam / AdamW, Lion, Adagrad (any case) and its params.
Status ParseOptimizer(JsonReader& root, TrainConfig* config);
// "scheduler": WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest and their params.
Status ParseScheduler(JsonReader& root, TrainConfig* config);

}  // namespace strata
