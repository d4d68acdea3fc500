// World size 1: every collective is a copy (when the output is a different buffer) or a no-op.
#include <cstring>

#include "strata/communicator.h"

namespace strata {
namespace {

class SingleRankCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  const char* name() const override { return "single"; }

  Status AllGather(const void* shard, void* full, size_t count, DType dtype) override {
    if (shard != full && count > 0) std::memmove(full, shard, count * DTypeSize(dtype));
    return Status::Ok();
  }
  Status ReduceScatter(const void* full, void* shard, size_t count, DType dtype, ReduceOp) override {
    if (shard != full && count > 0) std::memmove(shard, full, count * DTypeSize(dtype));
    return Status::Ok();
  }
  Status AllReduce(void*, size_t, DType, ReduceOp) override { return Status::Ok(); }
  Status Broadcast(void*, size_t, DType, int root) override {
    if (root != 0) return InvalidArgument("broadcast: root {} outside a world of 1", root);
    return Status::Ok();
  }
  Status Barrier() override { return Status::Ok(); }
};

}  // namespace

std::unique_ptr<Communicator> MakeSingleRankCommunicator() { return std::make_unique<SingleRankCommunicator>(); }

}  // namespace strata
