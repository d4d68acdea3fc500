// Checks a group communicator's collectives (Note [Process mesh]) against a serial reference
// built from the world ranks' inputs: the group's members in group-rank order, fp32 partials
// rounded once. Shared by the thread and the process tests; returns 0 or ChildFail's code.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <random>
#include <thread>

#include "comm/comm_test_util.h"
#include "comm/fork_ranks.h"
#include "strata/process_mesh.h"

namespace strata::testing {

// Sleeps 0-2 ms when `rng` is given: collectives that start at random moments.
inline void MaybeDelay(std::mt19937* rng) {
  if (rng) std::this_thread::sleep_for(std::chrono::microseconds((*rng)() % 2000));
}

inline int CheckGroupCollectives(Communicator& group, const ProcessMesh& mesh, unsigned axes, size_t count, DType dt,
                                 std::mt19937* rng = nullptr) {
  const std::vector<int> members = mesh.GroupRanks(axes);
  const int n = static_cast<int>(members.size()), me = group.rank(), world_rank = mesh.rank();
  const size_t esize = DTypeSize(dt);
  const std::string what = fmt::format("group {} of {} (axes {}), count {} {}", me, n, axes, count, DTypeName(dt));
  if (group.world_size() != n || members[static_cast<size_t>(me)] != world_rank)
    return ChildFail(world_rank, "group rank/size mismatch, " + what);
  std::vector<int> order(static_cast<size_t>(n));  // indices into `by_member` below: group order
  for (int i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  auto inputs = [&](size_t per_rank, uint32_t seed) {
    std::vector<Bytes> by_member;
    for (int r : members) by_member.push_back(MakeInput(r, per_rank, dt, seed));
    return by_member;
  };
  // All-gather.
  MaybeDelay(rng);
  Bytes full(n * count * esize), expected;
  for (const Bytes& b : inputs(count, 1)) expected.insert(expected.end(), b.begin(), b.end());
  Bytes shard = MakeInput(world_rank, count, dt, 1);
  if (Status s = group.AllGather(shard.data(), full.data(), count, dt); !s.ok()) return ChildFail(world_rank, s.ToString());
  if (full != expected) return ChildFail(world_rank, "all-gather mismatch, " + what);
  // Reduce-scatter.
  MaybeDelay(rng);
  const std::vector<Bytes> fulls = inputs(n * count, 5);
  Bytes out(count * esize);
  if (Status s = group.ReduceScatter(fulls[me].data(), out.data(), count, dt, ReduceOp::kSum); !s.ok())
    return ChildFail(world_rank, s.ToString());
  if (out != ReduceReference(fulls, me * count, count, dt, ReduceOp::kSum, [&](size_t) -> const auto& { return order; }))
    return ChildFail(world_rank, "reduce-scatter mismatch, " + what);
  // All-reduce, sum and max.
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    MaybeDelay(rng);
    const std::vector<Bytes> data = inputs(count, 9);
    Bytes mine = data[me];
    if (Status s = group.AllReduce(mine.data(), count, dt, op); !s.ok()) return ChildFail(world_rank, s.ToString());
    if (mine != ReduceReference(data, 0, count, dt, op, [&](size_t) -> const auto& { return order; }))
      return ChildFail(world_rank, "all-reduce mismatch, " + what);
  }
  // Broadcast from every group root.
  for (int root = 0; root < n; ++root) {
    MaybeDelay(rng);
    Bytes data = MakeInput(world_rank, count, dt, 11);
    if (Status s = group.Broadcast(data.data(), count, dt, root); !s.ok()) return ChildFail(world_rank, s.ToString());
    if (data != MakeInput(members[static_cast<size_t>(root)], count, dt, 11))
      return ChildFail(world_rank, fmt::format("broadcast root {} mismatch, {}", root, what));
  }
  // All-to-all: block j of member i's input reaches member j as its block i.
  MaybeDelay(rng);
  const std::vector<Bytes> sends = inputs(n * count, 13);
  Bytes got(n * count * esize), want;
  for (int i = 0; i < n; ++i)
    want.insert(want.end(), sends[i].begin() + me * count * esize, sends[i].begin() + (me + 1) * count * esize);
  if (Status s = group.AllToAll(sends[me].data(), got.data(), count, dt); !s.ok()) return ChildFail(world_rank, s.ToString());
  if (got != want) return ChildFail(world_rank, "all-to-all mismatch, " + what);
  if (Status s = group.Barrier(); !s.ok()) return ChildFail(world_rank, s.ToString());
  return 0;
}

}  // namespace strata::testing
