// The config as the commands read it from their options, before it is settled for a run
// (src/settle/settle.h).
#pragma once

#include <string>
#include <vector>

#include "src/config/run_config.h"
#include "src/config/train_config.h"

namespace strata::cli {

// `config` ("" = the built-in tiny config) + `strata_file` + --set overrides, parsed as
// written. *origin names the files in messages. Errors name the file and the key.
StatusOr<TrainConfig> ReadTrainConfig(const std::string& config, const std::string& strata_file,
                                      std::vector<std::string> sets, std::string* origin);

// The same, settled for `world` ranks without a machine to judge by (SettleRunConfig's safe
// values): what `config check` and `bench tune` describe. Errors name the files.
StatusOr<RunConfig> ReadSettledConfig(const std::string& config, const std::string& strata_file,
                                      std::vector<std::string> sets, int world);

}  // namespace strata::cli
