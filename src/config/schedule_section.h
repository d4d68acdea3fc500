// Folder-private: the keys of strata's section that order a step's work, say what it fetches
// and where its activations wait (schedule, fuse_micro_batches, block_inputs, expert_fetch,
// loss_chunk, mlp_chunk).
#pragma once

#include "src/config/json_reader.h"
#include "src/config/train_config.h"

namespace strata {

Status ParseSchedule(JsonReader& s, TrainConfig* c);

}  // namespace strata
