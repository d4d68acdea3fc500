// Resume on another rank count, ZeRO stage or sub_group_size: this rank's state is cut out of
// the checkpoint's shards by flat element range. Every old rank's tensor covers a range of
// its block's flat group that the old run's ShardPlan names (rebuilt from the manifest's
// world size, stage and sub_group_size); each of this run's tensors is assembled from the
// overlapping pieces, read through read-only mappings, so no rank ever holds more than one
// of its own tensors in memory. Master weights, m, v and the working weights are copied
// exactly; the padding past a group's real elements is zero.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "src/engine/engine.h"
#include "src/config/train_config.h"
#include "strata/status.h"

namespace strata::ckpt {

// True when the checkpoint's partitioning differs from this run's (world size, stage or
// sub_group_size), so RestoreResharded must be used.
bool NeedsResharding(const nlohmann::json& manifest, const TrainConfig& cfg, int world);

// Restores every tensor of this rank's state from all the checkpoint's rank files. Errors
// name the file and the tensor; a gap in a block's real elements is a DataLoss error.
Status RestoreResharded(Engine& engine, const TrainConfig& cfg, const nlohmann::json& manifest,
                        const std::string& step_dir);

}  // namespace strata::ckpt
