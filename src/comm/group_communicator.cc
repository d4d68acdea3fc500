// Group communicators carried by the world communicator (Note [Process mesh]).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "src/comm/reduce.h"
#include "strata/check.h"
#include "strata/process_mesh.h"

namespace strata {
namespace {

class GroupCommunicator final : public Communicator {
 public:
  GroupCommunicator(Communicator& world, std::vector<int> members, int group_rank, std::string name)
      : world_(world), members_(std::move(members)), rank_(group_rank), name_(std::move(name)) {}

  int rank() const override { return rank_; }
  int world_size() const override { return static_cast<int>(members_.size()); }
  const char* name() const override { return name_.c_str(); }

  Status AllGather(const void* shard, void* full, size_t count, DType dtype) override {
    const size_t block = count * DTypeSize(dtype);
    STRATA_RETURN_IF_ERROR(Gather(shard, count, dtype, "all-gather"));
    for (size_t i = 0; i < members_.size(); ++i) Copy(Member(i, block), static_cast<char*>(full) + i * block, block);
    return Status::Ok();
  }

  Status ReduceScatter(const void* full, void* shard, size_t count, DType dtype, ReduceOp op) override {
    const size_t block = count * DTypeSize(dtype);
    STRATA_RETURN_IF_ERROR(Gather(full, members_.size() * count, dtype, "reduce-scatter"));
    Reduce(members_.size() * block, static_cast<size_t>(rank_) * block, count, dtype, op, shard);
    return Status::Ok();
  }

  Status AllReduce(void* data, size_t count, DType dtype, ReduceOp op) override {
    STRATA_RETURN_IF_ERROR(Gather(data, count, dtype, "all-reduce"));
    Reduce(count * DTypeSize(dtype), 0, count, dtype, op, data);
    return Status::Ok();
  }

  Status Broadcast(void* data, size_t count, DType dtype, int root) override {
    if (root < 0 || root >= world_size())
      return InvalidArgument("{}: broadcast: root {} outside a group of {}", name_, root, world_size());
    const size_t block = count * DTypeSize(dtype);
    STRATA_RETURN_IF_ERROR(Gather(data, count, dtype, "broadcast"));
    Copy(Member(static_cast<size_t>(root), block), data, block);
    return Status::Ok();
  }

  Status Barrier() override {
    return world_.Barrier().WithContext(fmt::format("{}: barrier", name_));
  }

  Status AllToAll(const void* in, void* out, size_t count, DType dtype) override {
    const size_t block = count * DTypeSize(dtype), row = members_.size() * block;
    STRATA_RETURN_IF_ERROR(Gather(in, members_.size() * count, dtype, "all-to-all"));
    for (size_t i = 0; i < members_.size(); ++i)
      Copy(Member(i, row) + static_cast<size_t>(rank_) * block, static_cast<char*>(out) + i * block, block);
    return Status::Ok();
  }

 private:
  // Every world rank's `count` elements from `mine`, into gathered_. Alone in its group a
  // rank needs no one else's (and every group along the same axes is alone too: no world call).
  Status Gather(const void* mine, size_t count, DType dtype, const char* op) {
    const size_t bytes = count * DTypeSize(dtype);
    if (members_.size() == 1) {
      gathered_.resize(bytes);
      if (bytes > 0) std::memcpy(gathered_.data(), mine, bytes);
      return Status::Ok();
    }
    gathered_.resize(static_cast<size_t>(world_.world_size()) * bytes);
    return world_.AllGather(mine, gathered_.data(), count, dtype).WithContext(fmt::format("{}: {}", name_, op));
  }

  // Group member i's gathered bytes (each rank contributed `bytes`).
  const char* Member(size_t i, size_t bytes) const {
    const size_t world_rank = members_.size() == 1 ? 0 : static_cast<size_t>(members_[i]);
    return gathered_.data() + world_rank * bytes;
  }

  static void Copy(const char* from, void* to, size_t bytes) {
    if (bytes > 0 && from != to) std::memmove(to, from, bytes);
  }

  // out = op over members, in group-rank order, of their gathered bytes at `offset` (each
  // contributed `bytes`); fp32 partials, rounded once.
  void Reduce(size_t bytes, size_t offset, size_t count, DType dtype, ReduceOp op, void* out) {
    comm::ReduceInOrder([&](size_t k) { return Member(k, bytes) + offset; }, members_.size(), dtype, count, op, out);
  }

  Communicator& world_;
  const std::vector<int> members_;  // world ranks, in group-rank order
  const int rank_;
  const std::string name_;
  std::vector<char> gathered_;  // every world rank's contribution to the current collective
};

std::string AxesName(unsigned axes) {
  std::string s;
  for (auto [bit, name] : {std::pair{kDataAxis, "data"}, {kTensorAxis, "tensor"}, {kSequenceAxis, "sequence"}})
    if (axes & bit) s += (s.empty() ? "" : "+") + std::string(name);
  return s.empty() ? "none" : s;
}

}  // namespace

std::unique_ptr<Communicator> MakeGroupCommunicator(Communicator& world, const ProcessMesh& mesh, unsigned axes) {
  STRATA_CHECK(world.world_size() == mesh.shape().world() && world.rank() == mesh.rank())
      << "group communicator: the world (rank " << world.rank() << " of " << world.world_size()
      << ") is not the mesh's (" << mesh.Describe() << ", rank " << mesh.rank() << ")";
  std::vector<int> members = mesh.GroupRanks(axes);
  const int group_rank = static_cast<int>(std::find(members.begin(), members.end(), mesh.rank()) - members.begin());
  std::string name = fmt::format("{} group {} ({} ranks over {})", AxesName(axes), mesh.GroupIndex(axes),
                                 members.size(), world.name());
  return std::make_unique<GroupCommunicator>(world, std::move(members), group_rank, std::move(name));
}

}  // namespace strata
