// Folder-private: DeepSpeed's "checkpoint" section, of which Strata reads use_node_local_storage
// (default false, as DeepSpeed 0.19.8's): each node's ranks save into a --save folder of their
// node's own (node-local disks, no shared file system) instead of one folder every rank shares.
// Its other keys (tag_validation, load_universal, ...) change nothing Strata does: the unused-key
// warning names them.
#pragma once

#include "src/config/json_reader.h"
#include "src/config/train_config.h"

namespace strata {

Status ParseCheckpointSection(JsonReader& root, TrainConfig* config);

}  // namespace strata
