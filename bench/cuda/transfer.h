// Test and benchmark helpers for the GPU machine (not part of Strata's API): host <-> device
// copies on streams of their own, and device memory. The trainer's own copies go through the
// compute device (src/device/cuda/cuda_device.cc). Toolkit-free header: buffers are raw
// pointers, streams a cudaStream_t passed as void*.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "strata/status.h"

namespace strata::cuda {

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

}  // namespace strata::cuda
