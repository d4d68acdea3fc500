// MeshPlace: this rank's place in the process mesh (Note [Process mesh]) as the engine sees it:
// which data rank it is (whose micro-batches it reads), which positions of each row it holds
// (Note [Ulysses]), and the groups its blocks' collectives run on (sequence: all-to-alls;
// tensor: all-reduces, Note [Tensor parallel]). Without sequence_parallel_size and
// tensor_parallel (1 each), every rank is a data rank holding whole rows and whole layers, and
// there are no groups.
//
// The ranks of one sequence group read the same micro-batch and take consecutive shards of
// its rows. Each rank's loss is the mean over its own positions, so the sum over a group is S
// times the rows' mean: the engine's mean over the world's losses and gradients (1 / world) is
// then the mean over data ranks of each row's mean, as data parallelism computes it. The ranks
// of a tensor group read the same micro-batch too and hold its whole rows: each computes the
// same loss, counted T times in the world's mean, as each whole-run tensor's gradient is (a
// split tensor's slices are taken times T: Note [Tensor parallel]).
#pragma once

#include <memory>

#include "src/data/data.h"
#include "src/device/compute_device.h"
#include "strata/communicator.h"
#include "strata/process_mesh.h"
#include "strata/status.h"

namespace strata {

class MeshPlace {
 public:
  // `sequence`: sequence_parallel_size; `tensor`: tensor_parallel; `world`: ZeRO's
  // communicator; `blocks_world`: the same ranks again, for the blocks' groups alone (required
  // when either is above 1); `device`: where the blocks run, which turns each group over host
  // buffers into one for its tensors (ComputeDevice::BlockGroup: NCCL on a GPU).
  static StatusOr<MeshPlace> Make(int sequence, int tensor, Communicator& world, Communicator* blocks_world,
                                  ComputeDevice& device);

  int data_rank() const { return data_rank_; }
  int data_ranks() const { return data_ranks_; }
  // The sequence group's size (1: whole rows) and the tensor group's (1: whole layers).
  int size() const { return size_; }
  int tensor_size() const { return tensor_size_; }
  // This rank's place in its tensor group (0 .. tensor_size - 1): the group's members compute the
  // same results, and where they are summed over the world only the first one's count.
  int tensor_index() const { return tensor_index_; }
  // This rank's place in its sequence group (0 .. size - 1): which shard of each row it holds.
  int sequence_index() const { return index_; }
  // The ranks that read different batches or different positions of them: world / tensor.
  int loss_ranks() const { return data_ranks_ * size_; }
  // The blocks' groups; null with whole rows / whole layers.
  Communicator* group() const { return group_.get(); }
  Communicator* tensor_group() const { return tensor_group_.get(); }
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
  int data_rank_ = 0, data_ranks_ = 1, index_ = 0, size_ = 1, tensor_size_ = 1, tensor_index_ = 0;
  std::shared_ptr<Communicator> group_, tensor_group_;
};

}  // namespace strata
