// Factories for the CUDA build (STYLE rule 1: this header includes no CUDA or NCCL header,
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

// Host <-> device copies on dedicated streams (one H2D, one D2H), ordered with other work
// through events, never a device-wide synchronisation. Buffers are raw pointers; host
// memory must be pinned for the copy to be asynchronous.
class Transfer {
 public:
  virtual ~Transfer() = default;
  // Queues a copy; returns a sequence number to Wait on (monotonic per direction).
  virtual StatusOr<uint64_t> ToDevice(void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual StatusOr<uint64_t> ToHost(void* host_dst, const void* device_src, size_t bytes) = 0;
  // Blocks the calling thread until copy `seq` of that direction finished.
  virtual Status WaitToDevice(uint64_t seq) = 0;
  virtual Status WaitToHost(uint64_t seq) = 0;
  // Makes the `consumer_stream` (a cudaStream_t, e.g. LibTorch's current stream) wait for
  // H2D copy `seq` on the device, without blocking the host.
  virtual Status StreamWaitToDevice(void* consumer_stream, uint64_t seq) = 0;
};
StatusOr<std::unique_ptr<Transfer>> MakeTransfer(int device);

// Device memory for tests and benchmarks (RAII).
class DeviceBuffer {
 public:
  static StatusOr<DeviceBuffer> Allocate(size_t bytes);
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  ~DeviceBuffer();
  void* data() const { return ptr_; }
  size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Collectives enqueued on a CUDA stream the caller gives (a cudaStream_t, as void*) and not
// waited for: the caller orders them with events (the engine's asynchronous device path).
class StreamCollectives {
 public:
  virtual ~StreamCollectives() = default;
  virtual Status AllGatherOn(void* stream, const void* shard, void* full, size_t count, DType dtype) = 0;
  virtual Status ReduceScatterOn(void* stream, const void* full, void* shard, size_t count, DType dtype,
                                 ReduceOp op) = 0;
  virtual Status AllReduceOn(void* stream, void* data, size_t count, DType dtype, ReduceOp op) = 0;
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
