// SequenceShards: this rank's place in sequence parallelism (Note [Ulysses]) as the engine
// sees it: which data rank it is (whose micro-batches it reads), which positions of each row
// it holds, and the group its blocks' all-to-alls run on. Without sequence_parallel_size (1),
// every rank is a data rank holding whole rows and there is no group.
//
// The world splits as data × sequence (Note [Process mesh]; tensor 1): the ranks of one
// sequence group read the same micro-batch and take consecutive shards of its rows. Each
// rank's loss is the mean over its own positions, so the sum over a group is S times the
// rows' mean: the engine's mean over the world's losses and gradients (1 / world) is then the
// mean over data ranks of each row's mean, as data parallelism computes it.
#pragma once

#include <memory>

#include "src/data/data.h"
#include "strata/communicator.h"
#include "strata/process_mesh.h"
#include "strata/status.h"

namespace strata {

class SequenceShards {
 public:
  // `sequence`: sequence_parallel_size; `world`: ZeRO's communicator; `blocks_world`: the same
  // ranks again, for the blocks' group alone (required when sequence > 1).
  static StatusOr<SequenceShards> Make(int sequence, Communicator& world, Communicator* blocks_world);

  int data_rank() const { return data_rank_; }
  int data_ranks() const { return data_ranks_; }
  int size() const { return size_; }
  // The blocks' group; null with whole rows.
  Communicator* group() const { return group_.get(); }
  // The first position this rank holds of a row of `seq_len`.
  int64_t offset(int64_t seq_len) const { return index_ * (seq_len / size_); }
  // `batch` with only this rank's positions of every row (the batch itself with whole rows):
  // its inputs, targets and loss mask. Packed examples' positions stay whole: attention runs
  // over whole rows, and each block reads its shard's part of them (BlockContext's offset).
  data::Batch Slice(const data::Batch& batch) const;
  // Loss masks (Note [Loss mask]): the trained targets of each batch's positions here (its
  // slices of `batches`, already taken).
  static std::vector<int64_t> TrainedTargets(const std::vector<data::Batch>& batches);

 private:
  int data_rank_ = 0, data_ranks_ = 1, index_ = 0, size_ = 1;
  std::shared_ptr<Communicator> group_;
};

}  // namespace strata
