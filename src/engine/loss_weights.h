// Folder-private: how a loss mask weighs each micro-batch's loss, so that a step's loss is
// the mean over the step's trained targets (Note [Loss mask], loss_weights.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "src/data/data.h"
#include "src/engine/sequence_shards.h"
#include "strata/status.h"

namespace strata {

// The batches of one step (or one evaluation): `per_rank` batches of `batch_size` rows on
// each of `world` ranks, global indices first .. first + per_rank * world - 1, rank r's k-th
// being first + k * world + r (data.h). Returns, for each of this rank's batches in order,
// the factor its masked mean loss is multiplied by: all exactly 1 without a mask, or with
// a mask that trains every target. `what` names the step in the error returned when none
// of the batches has a trained target.
StatusOr<std::vector<double>> LossWeights(const data::TokenDataset& data, data::Split split, uint64_t first,
                                          int64_t per_rank, int world, int rank, int64_t batch_size,
                                          const std::string& what);

// Rows split over sequence groups (Note [Ulysses]): `world` ranks of which `data_ranks` read
// the step's batches; `counts[k]`, the trained targets of this rank's positions in its k-th
// batch. Each rank's masked mean is weighed by its own count.
StatusOr<std::vector<double>> SplitRowLossWeights(const data::TokenDataset& data, data::Split split, uint64_t first,
                                                  int world, int data_ranks, int64_t batch_size,
                                                  const std::vector<int64_t>& counts, const std::string& what);

// The weights of this rank's `batches` of a step or an evaluation (already its positions,
// SequenceShards::Slice), the first of them global batch `first`: LossWeights with whole rows,
// SplitRowLossWeights with rows split over `seq`'s groups.
StatusOr<std::vector<double>> BatchLossWeights(const data::TokenDataset& data, data::Split split, uint64_t first,
                                               const SequenceShards& seq, int world,
                                               const std::vector<data::Batch>& batches, int64_t batch_size,
                                               const std::string& what);

}  // namespace strata
