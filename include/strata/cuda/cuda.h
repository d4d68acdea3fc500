// Factories for the CUDA build (docs/STYLE.md rule 1: this header includes no CUDA or NCCL header,
// so any file may include it; the implementations live in */cuda/ folders and are compiled
// by nvcc's host compiler against the CUDA runtime and NCCL only).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "strata/communicator.h"
#include "strata/host_pinner.h"
#include "strata/status.h"

namespace strata::cuda {

// True when a CUDA device can be used; otherwise `why` says what is missing (no driver,
// no device). Tests labelled gpu skip on false.
bool DeviceAvailable(std::string* why);
// The product name of CUDA device `device` ("NVIDIA H100 80GB HBM3"), "" when unknown.
std::string DeviceName(int device);

// Page-locks host memory with cudaHostRegister (portable, mapped), so that copies to and
// from any device run at full PCIe/NVLink speed and asynchronously.
std::unique_ptr<HostPinner> MakeCudaHostPinner();

// Collectives enqueued on a CUDA stream the caller gives (a cudaStream_t, as void*) and not
// waited for: the caller orders them with events (the engine's asynchronous device path).
class StreamCollectives {
 public:
  virtual ~StreamCollectives() = default;
  virtual Status AllGatherOn(void* stream, const void* shard, void* full, size_t count, DType dtype) = 0;
  virtual Status ReduceScatterOn(void* stream, const void* full, void* shard, size_t count, DType dtype,
                                 ReduceOp op) = 0;
  virtual Status AllReduceOn(void* stream, void* data, size_t count, DType dtype, ReduceOp op) = 0;
  virtual Status BroadcastOn(void* stream, void* data, size_t count, DType dtype, int root) = 0;
  // Block r of `in` to group rank r (communicator.h's AllToAll), as grouped sends and receives.
  virtual Status AllToAllOn(void* stream, const void* in, void* out, size_t count, DType dtype) = 0;
  // An asynchronous NCCL error (a peer died mid-collective), if any.
  virtual Status AsyncError() = 0;
};

// NCCL communicator for device buffers. The ncclUniqueId is created by rank 0 and broadcast
// through `bootstrap` (the CPU communicator, itself met through the TCP store), so NCCL
// needs no rendezvous of its own. Its Communicator methods follow communicator.h's contract
// on NCCL's own stream and block until complete; stream_collectives() enqueues on the
// caller's streams instead.
class NcclCommunicator : public Communicator {
 public:
  virtual StreamCollectives* stream_collectives() = 0;
};
StatusOr<std::unique_ptr<NcclCommunicator>> MakeNcclCommunicator(Communicator* bootstrap, int device);
// Bytes of memory of CUDA device `device` (0 when unknown).
uint64_t DeviceMemoryBytes(int device);

}  // namespace strata::cuda
