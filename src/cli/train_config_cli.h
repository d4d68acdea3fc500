// The config as `train`, `config check` and `estimate` resolve it from their options.
#pragma once

#include <string>
#include <vector>

#include "src/engine/train_config.h"

namespace strata::cli {

// `config` ("" = the built-in tiny config) + `strata_file` + --set overrides, parsed, with
// the batch keys resolved for `world_size` ranks. Errors name the file and the key.
StatusOr<TrainConfig> ResolveTrainConfig(const std::string& config, const std::string& strata_file,
                                         std::vector<std::string> sets, int world_size);

}  // namespace strata::cli
