// ProcessMesh: the coordinates of Note [Process mesh] (include/strata/process_mesh.h).
#include "strata/process_mesh.h"

#include <fmt/format.h>

#include "strata/check.h"

namespace strata {

StatusOr<ProcessMesh> ProcessMesh::Make(MeshShape shape, int world_size, int rank) {
  if (shape.data < 1 || shape.tensor < 1 || shape.sequence < 1)
    return InvalidArgument("process mesh: data {} x tensor {} x sequence {}: every size must be at least 1", shape.data,
                           shape.tensor, shape.sequence);
  if (shape.world() != world_size)
    return InvalidArgument("process mesh: data {} x tensor {} x sequence {} is {} ranks, but the world has {}",
                           shape.data, shape.tensor, shape.sequence, shape.world(), world_size);
  if (rank < 0 || rank >= world_size)
    return InvalidArgument("process mesh: rank {} outside a world of {}", rank, world_size);
  return ProcessMesh(shape, rank);
}

MeshCoord ProcessMesh::CoordOf(int rank) const {
  STRATA_CHECK(rank >= 0 && rank < shape_.world()) << "rank " << rank << " of " << shape_.world();
  return {rank / (shape_.tensor * shape_.sequence), rank % shape_.tensor, (rank / shape_.tensor) % shape_.sequence};
}

int ProcessMesh::RankOf(MeshCoord c) const {
  return (c.data * shape_.sequence + c.sequence) * shape_.tensor + c.tensor;
}

std::vector<int> ProcessMesh::GroupRanks(unsigned axes) const {
  const MeshCoord me = coord();
  std::vector<int> ranks;
  for (int r = 0; r < shape_.world(); ++r) {
    const MeshCoord c = CoordOf(r);
    const bool same = ((axes & kDataAxis) || c.data == me.data) && ((axes & kTensorAxis) || c.tensor == me.tensor) &&
                      ((axes & kSequenceAxis) || c.sequence == me.sequence);
    if (same) ranks.push_back(r);
  }
  return ranks;
}

int ProcessMesh::GroupIndex(unsigned axes) const {
  // The coordinates outside `axes`, in the mesh's own order (data, sequence, tensor).
  const MeshCoord c = coord();
  int index = 0;
  if (!(axes & kDataAxis)) index = index * shape_.data + c.data;
  if (!(axes & kSequenceAxis)) index = index * shape_.sequence + c.sequence;
  if (!(axes & kTensorAxis)) index = index * shape_.tensor + c.tensor;
  return index;
}

std::string ProcessMesh::Describe() const {
  return fmt::format("data {} x tensor {} x sequence {}", shape_.data, shape_.tensor, shape_.sequence);
}

}  // namespace strata
