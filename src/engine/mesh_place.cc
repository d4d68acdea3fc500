#include "src/engine/mesh_place.h"

namespace strata {

StatusOr<MeshPlace> MeshPlace::Make(int sequence, int tensor, Communicator& world, Communicator* blocks_world,
                                    ComputeDevice& device) {
  MeshPlace s;
  s.data_rank_ = world.rank();
  s.data_ranks_ = world.world_size();
  if (sequence == 1 && tensor == 1) return s;
  if (blocks_world == nullptr || blocks_world->world_size() != world.world_size() || blocks_world->rank() != world.rank())
    return InvalidArgument("sequence_parallel_size {} x tensor_parallel {}: the blocks need a communicator of their own "
                           "over the same {} ranks", sequence, tensor, world.world_size());
  // (A world that the groups do not divide: the mesh's error names the sizes.)
  const int model_ranks = sequence * tensor;
  STRATA_ASSIGN_OR_RETURN(ProcessMesh mesh, ProcessMesh::Make({world.world_size() / model_ranks, tensor, sequence},
                                                              world.world_size(), world.rank()));
  s.data_rank_ = mesh.coord().data;
  s.data_ranks_ = mesh.shape().data;
  s.index_ = mesh.coord().sequence;
  s.size_ = sequence;
  s.tensor_size_ = tensor;
  s.tensor_index_ = mesh.coord().tensor;
  // Every rank makes its groups in the same order (a GPU's meet through the host group).
  if (sequence > 1) {
    STRATA_ASSIGN_OR_RETURN(s.group_, device.BlockGroup(MakeGroupCommunicator(*blocks_world, mesh, kSequenceAxis)));
  }
  if (tensor > 1) {
    STRATA_ASSIGN_OR_RETURN(s.tensor_group_, device.BlockGroup(MakeGroupCommunicator(*blocks_world, mesh, kTensorAxis)));
  }
  return s;
}

data::Batch MeshPlace::Slice(const data::Batch& batch) const {
  if (size_ == 1) return batch;
  const int64_t n = batch.inputs.size(1) / size_, at = index_ * n;
  data::Batch shard = batch;
  shard.inputs = batch.inputs.slice(1, at, at + n).contiguous();
  shard.targets = batch.targets.slice(1, at, at + n).contiguous();
  if (batch.loss_mask.defined()) shard.loss_mask = batch.loss_mask.slice(1, at, at + n).contiguous();
  return shard;
}

std::vector<int64_t> MeshPlace::TrainedTargets(const std::vector<data::Batch>& batches) {
  std::vector<int64_t> counts;
  for (const data::Batch& b : batches) counts.push_back(b.loss_mask.sum().item<int64_t>());
  return counts;
}

}  // namespace strata
