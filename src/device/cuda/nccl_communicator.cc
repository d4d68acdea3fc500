// The GPU communicator: NCCL on its own stream, device buffers. Uses only the CUDA runtime
// and NCCL, so CI compiles it with nvcc's toolchain on a machine without a GPU.
// Bootstrap: rank 0 creates the ncclUniqueId and broadcasts its 128 bytes through the CPU
// communicator (which met through the TCP store), so there is one rendezvous, not two.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>

#include "strata/cuda/cuda.h"

namespace strata::cuda {
namespace {

Status Nccl(ncclResult_t r, const char* what, int rank) {
  if (r == ncclSuccess) return Status();
  return Error(StatusCode::kIoError, "{} on rank {}: {} ({})", what, rank, ncclGetErrorString(r), ncclGetLastError(nullptr));
}
Status Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status();
  return Error(StatusCode::kIoError, "{}: {}", what, cudaGetErrorString(e));
}

ncclDataType_t NcclType(DType t) {
  return t == DType::kF32 ? ncclFloat32 : t == DType::kBF16 ? ncclBfloat16 : ncclFloat16;
}

class NcclCommunicatorImpl final : public NcclCommunicator, public StreamCollectives {
 public:
  NcclCommunicatorImpl(int rank, int world) : rank_(rank), world_(world) {}
  ~NcclCommunicatorImpl() override {
    if (comm_) ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status Init(Communicator* bootstrap, int device) {
    STRATA_RETURN_IF_ERROR(Cuda(cudaSetDevice(device), "cudaSetDevice"));
    STRATA_RETURN_IF_ERROR(Cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (rank_ == 0) STRATA_RETURN_IF_ERROR(Nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", rank_));
    // 128 bytes as fp32 words: the broadcast copies bits, it does not add them.
    static_assert(sizeof(ncclUniqueId) % 4 == 0);
    STRATA_RETURN_IF_ERROR(bootstrap->Broadcast(&id, sizeof id / 4, DType::kF32, 0));
    return Nccl(ncclCommInitRank(&comm_, world_, id, rank_), "ncclCommInitRank", rank_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  const char* name() const override { return "nccl"; }

  Status AllGather(const void* shard, void* full, size_t count, DType dtype) override {
    STRATA_RETURN_IF_ERROR(Nccl(ncclAllGather(shard, full, count, NcclType(dtype), comm_, stream_), "all-gather", rank_));
    return Sync("all-gather");
  }
  Status ReduceScatter(const void* full, void* shard, size_t count, DType dtype, ReduceOp op) override {
    STRATA_RETURN_IF_ERROR(
        Nccl(ncclReduceScatter(full, shard, count, NcclType(dtype), Op(op), comm_, stream_), "reduce-scatter", rank_));
    return Sync("reduce-scatter");
  }
  Status AllReduce(void* data, size_t count, DType dtype, ReduceOp op) override {
    STRATA_RETURN_IF_ERROR(
        Nccl(ncclAllReduce(data, data, count, NcclType(dtype), Op(op), comm_, stream_), "all-reduce", rank_));
    return Sync("all-reduce");
  }
  Status Broadcast(void* data, size_t count, DType dtype, int root) override {
    STRATA_RETURN_IF_ERROR(
        Nccl(ncclBroadcast(data, data, count, NcclType(dtype), root, comm_, stream_), "broadcast", rank_));
    return Sync("broadcast");
  }
  Status AllToAll(const void* in, void* out, size_t count, DType dtype) override {
    STRATA_RETURN_IF_ERROR(AllToAllOn(stream_, in, out, count, dtype));
    return Sync("all-to-all");
  }
  StreamCollectives* stream_collectives() override { return this; }
  Status AllGatherOn(void* stream, const void* shard, void* full, size_t count, DType dtype) override {
    return Nccl(ncclAllGather(shard, full, count, NcclType(dtype), comm_, static_cast<cudaStream_t>(stream)),
                "all-gather", rank_);
  }
  Status ReduceScatterOn(void* stream, const void* full, void* shard, size_t count, DType dtype, ReduceOp op) override {
    return Nccl(ncclReduceScatter(full, shard, count, NcclType(dtype), Op(op), comm_, static_cast<cudaStream_t>(stream)),
                "reduce-scatter", rank_);
  }
  Status AllReduceOn(void* stream, void* data, size_t count, DType dtype, ReduceOp op) override {
    return Nccl(ncclAllReduce(data, data, count, NcclType(dtype), Op(op), comm_, static_cast<cudaStream_t>(stream)),
                "all-reduce", rank_);
  }
  Status BroadcastOn(void* stream, void* data, size_t count, DType dtype, int root) override {
    return Nccl(ncclBroadcast(data, data, count, NcclType(dtype), root, comm_, static_cast<cudaStream_t>(stream)),
                "broadcast", rank_);
  }
  // Point-to-point, grouped so NCCL runs every send and receive at once: block r to rank r.
  Status AllToAllOn(void* stream, const void* in, void* out, size_t count, DType dtype) override {
    const size_t block = count * DTypeSize(dtype);
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    STRATA_RETURN_IF_ERROR(Nccl(ncclGroupStart(), "all-to-all", rank_));
    for (int r = 0; r < world_; ++r) {
      const ncclResult_t send = ncclSend(static_cast<const char*>(in) + r * block, count, NcclType(dtype), r, comm_, s);
      const ncclResult_t recv = ncclRecv(static_cast<char*>(out) + r * block, count, NcclType(dtype), r, comm_, s);
      if (send != ncclSuccess || recv != ncclSuccess) {
        ncclGroupEnd();
        return Nccl(send != ncclSuccess ? send : recv, "all-to-all", rank_);
      }
    }
    return Nccl(ncclGroupEnd(), "all-to-all", rank_);
  }
  Status AsyncError() override {
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    return Nccl(async, "NCCL", rank_);
  }

  Status Barrier() override {
    // A one-element all-reduce on a scratch word is NCCL's barrier.
    if (!scratch_) STRATA_RETURN_IF_ERROR(Cuda(cudaMalloc(&scratch_, 4), "cudaMalloc"));
    return AllReduce(scratch_, 1, DType::kF32, ReduceOp::kSum);
  }

 private:
  static ncclRedOp_t Op(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }
  Status Sync(const char* what) {
    // Blocking semantics of communicator.h. A peer that died shows up as an async error.
    const cudaError_t e = cudaStreamSynchronize(stream_);
    if (e != cudaSuccess) return Cuda(e, what);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    return Nccl(async, what, rank_);
  }

  int rank_, world_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
};

}  // namespace

StatusOr<std::unique_ptr<NcclCommunicator>> MakeNcclCommunicator(Communicator* bootstrap, int device) {
  auto c = std::make_unique<NcclCommunicatorImpl>(bootstrap->rank(), bootstrap->world_size());
  STRATA_RETURN_IF_ERROR(c->Init(bootstrap, device));
  return std::unique_ptr<NcclCommunicator>(std::move(c));
}

}  // namespace strata::cuda
