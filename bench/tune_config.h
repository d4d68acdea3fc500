// `bench tune --write`: puts the tuned settings into a ds_config.json, keeping every other key
// and the order of the keys, and replacing the file atomically with the original kept beside it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "strata/status.h"

namespace strata::bench {

struct TunedSettings {
  int64_t block_size = 0;   // aio.block_size, bytes
  int64_t queue_depth = 0;  // aio.queue_depth
  // zero_optimization.offload_param.buffer_count; written only where that section exists.
  std::optional<int64_t> param_buffer_count;
};

// Sets aio.block_size and aio.queue_depth (creating "aio" when absent; its other keys kept) and,
// when the config has zero_optimization.offload_param and a count is given, its buffer_count.
// Returns the keys it set, as "aio.block_size", ... (for the message). kInvalidArgument when the
// config is not an object or "aio" / offload_param are not objects.
StatusOr<std::vector<std::string>> ApplyTuning(nlohmann::ordered_json* config, const TunedSettings& settings);

struct TunedWrite {
  std::vector<std::string> keys;  // ApplyTuning's
  bool backup_written = false;    // false: `path`.bak existed and was left as it was
};

// Reads the JSON file `path`, applies the settings, keeps the original bytes as `path`.bak
// unless that file exists (an earlier --write's backup of the pristine config, or a file of
// the user's: never replaced), then writes the new config through a temporary file in the
// same folder, fsynced and renamed over `path` (so a crash leaves either the old or the new
// file, never half of one, and a failure leaves no temporary). Both keep `path`'s mode.
StatusOr<TunedWrite> WriteTunedConfig(const std::string& path, const TunedSettings& settings);

}  // namespace strata::bench
