// Folder-private: how a loss mask weighs each micro-batch's loss, so that a step's loss is
// the mean over the step's trained targets (Note [Loss mask], loss_weights.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "src/data/data.h"
#include "src/engine/mesh_place.h"
#include "strata/status.h"

namespace strata {

// The batches of one step (or one evaluation): `batches.size()` on each of `seq`'s data ranks
// (all `world` ranks with whole rows), global indices first .. first + size x data ranks - 1,
// data rank r's k-th being first + k x data ranks + r (data.h); `batches` are this rank's, its
// positions of them with rows split over sequence groups (MeshPlace::Slice). Returns, for
// each in order, the factor its masked mean loss is multiplied by: all exactly 1 with a mask
// that trains every target. `what` names the step in the error returned when none of the
// batches has a trained target.
StatusOr<std::vector<double>> BatchLossWeights(const data::TokenDataset& data, data::Split split, uint64_t first,
                                               const MeshPlace& seq, int world,
                                               const std::vector<data::Batch>& batches, int64_t batch_size,
                                               const std::string& what);

}  // namespace strata
