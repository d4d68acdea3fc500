// Folder-private: DeepSpeed's monitor sections that Strata writes, "tensorboard" and
// "csv_monitor" (enabled, output_path, job_name) and "wandb" (enabled, group, team, project),
// with DeepSpeed 0.19.8's defaults; "comet" stays a note (src/config/unsupported_keys.h).
#pragma once

#include "src/config/json_reader.h"
#include "src/config/train_config.h"

namespace strata {

Status ParseMonitors(JsonReader& root, TrainConfig* config);

}  // namespace strata
