// Communicator: the collectives that ZeRO needs, over flat buffers of one DType.
//
// Semantics (every implementation):
//  - Blocking: a call returns when this rank's part is complete and its output is valid.
//  - Every rank calls the same collectives in the same order with the same count and dtype.
//  - Deterministic: the same inputs give bitwise the same outputs on every run (reductions
//    always add in the same order), so results do not depend on timing.
//  - Sums of bf16/fp16 are accumulated in fp32 and rounded once (round-to-nearest-even).
//  - Errors (a peer died, a timeout, a socket error) come back as a Status naming the peer
//    rank and the operation, within the timeout given at creation; never a hang.
// Threading: one thread uses a communicator at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "strata/dtype.h"
#include "strata/status.h"

namespace strata {

enum class ReduceOp { kSum, kMax };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual const char* name() const = 0;

  // full[r*count .. (r+1)*count) = shard of rank r, for every r. `full` holds
  // world_size*count elements; `shard` may alias full + rank*count.
  virtual Status AllGather(const void* shard, void* full, size_t count, DType dtype) = 0;
  // shard = reduce over ranks of full[rank*count .. (rank+1)*count). `full` holds
  // world_size*count elements and is not modified.
  virtual Status ReduceScatter(const void* full, void* shard, size_t count, DType dtype, ReduceOp op) = 0;
  // In place: data = reduce over ranks of data.
  virtual Status AllReduce(void* data, size_t count, DType dtype, ReduceOp op) = 0;
  // In place: data = data of rank `root`.
  virtual Status Broadcast(void* data, size_t count, DType dtype, int root) = 0;
  virtual Status Barrier() = 0;
  // out[r*count .. (r+1)*count) = block `rank` of rank r's `in`, for every r: block r of `in`
  // goes to rank r. `in` and `out` hold world_size*count elements each and do not overlap.
  // The base, for host buffers, gathers every rank's whole `in` (world_size times the bytes
  // a direct exchange moves): exact on any CPU transport, for their small exchanges; NCCL
  // (device buffers) overrides it with grouped sends and receives.
  virtual Status AllToAll(const void* in, void* out, size_t count, DType dtype);
};

// The launcher contract (torchrun / Slurm / `strata train --nproc N`).
struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (falling back to Slurm's
  // SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID). All absent: a single rank. A malformed or
  // inconsistent value is an error naming the variable.
  static StatusOr<LaunchEnv> FromEnvironment();
};

// A single rank: every collective is a copy or a no-op.
std::unique_ptr<Communicator> MakeSingleRankCommunicator();

// `world_size` ranks as threads of this process (tests): element i is rank i's
// communicator, to be used from its own thread.
std::vector<std::unique_ptr<Communicator>> MakeLocalCommunicators(int world_size);

// The CPU backend across processes: rendezvous through a TCP store at
// master_addr:master_port (rank 0 hosts it), then a TCP ring between the ranks.
// `timeout` bounds the rendezvous and every blocking receive.
StatusOr<std::unique_ptr<Communicator>> MakeTcpCommunicator(const LaunchEnv& env, std::chrono::milliseconds timeout);
// `count` communicators over the same ranks from one rendezvous, each its own ring: for
// collectives that run on different threads at once (Note [Process mesh]).
StatusOr<std::vector<std::unique_ptr<Communicator>>> MakeTcpCommunicators(const LaunchEnv& env,
                                                                          std::chrono::milliseconds timeout, int count);

}  // namespace strata
