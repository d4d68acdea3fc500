// The process mesh: how the world's ranks split into data-, tensor- and sequence-parallel
// groups, and a communicator for each group.
//
// Note [Process mesh]
// world = data × tensor × sequence. A rank's coordinates follow Megatron's order, tensor
// fastest, then sequence, then data: rank = (d * S + s) * T + t, so that the ranks that
// exchange most (a tensor group, every sublayer) are neighbours, on one node where the node
// is large enough. A group along a set of axes is the ranks that share every other
// coordinate: the tensor group of rank r varies t alone; ZeRO's group for the weights varies
// d and s (DeepSpeed's Ulysses: the sequence ranks are data-parallel ranks for the weights).
// Group rank i is the i-th of its members in world-rank order.
//
// A group communicator carries its collectives over the world communicator, so that every
// transport (local threads, the TCP ring, NCCL) has groups without a second rendezvous. The
// contract this asks: every group along the same axes calls the same collective at the same
// time, with the same count and dtype (as model-parallel code does: every tensor group runs
// the same sublayer), and no other thread uses the world communicator meanwhile: the engine's
// ZeRO traffic runs on threads of its own, so the blocks' groups ride on a world of their own
// (a second ring from the same rendezvous), not on ZeRO's. Each collective is
// one world all-gather from which a member keeps its group's blocks and reduces them itself,
// in group-rank order in fp32 (Note [fp32 accumulation]): every member computes the same
// bits, and a group of one rank is a copy. It moves world / group times the bytes of a ring
// inside the group and stages them in host memory: for the CPU backends (host buffers) and
// their small exchanges. Blocks on a GPU turn their group into an NCCL communicator of the
// group's ranks alone, met through it (ComputeDevice::BlockGroup), whose collectives run on
// the calling block's stream.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "strata/communicator.h"
#include "strata/status.h"

namespace strata {

struct MeshShape {
  int data = 1, tensor = 1, sequence = 1;
  int world() const { return data * tensor * sequence; }
  bool operator==(const MeshShape&) const = default;
};

// A set of axes: a group along kTensor | kSequence varies both coordinates.
enum MeshAxes : unsigned { kDataAxis = 1, kTensorAxis = 2, kSequenceAxis = 4 };

struct MeshCoord {
  int data = 0, tensor = 0, sequence = 0;
  bool operator==(const MeshCoord&) const = default;
};

class ProcessMesh {
 public:
  // `shape` over a world of `world_size` ranks, seen from `rank`. An error names the sizes
  // when the shape does not multiply to the world.
  static StatusOr<ProcessMesh> Make(MeshShape shape, int world_size, int rank);

  const MeshShape& shape() const { return shape_; }
  int rank() const { return rank_; }
  MeshCoord coord() const { return CoordOf(rank_); }
  MeshCoord CoordOf(int rank) const;
  int RankOf(MeshCoord coord) const;

  // The world ranks of this rank's group along `axes`, in world-rank order.
  std::vector<int> GroupRanks(unsigned axes) const;
  // Which group along `axes` this rank is in: 0 .. world / group size - 1.
  int GroupIndex(unsigned axes) const;
  // "data 2 x tensor 2 x sequence 1": for start-up lines and errors.
  std::string Describe() const;

 private:
  ProcessMesh(MeshShape shape, int rank) : shape_(shape), rank_(rank) {}
  MeshShape shape_;
  int rank_ = 0;
};

// A communicator over this rank's group along `axes`, carried by `world` (which must outlive
// it and be the mesh's world). See Note [Process mesh] for what callers owe it.
std::unique_ptr<Communicator> MakeGroupCommunicator(Communicator& world, const ProcessMesh& mesh, unsigned axes);

}  // namespace strata
