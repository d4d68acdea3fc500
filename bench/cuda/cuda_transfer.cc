// Transfer: H2D and D2H each on a dedicated non-blocking stream; every copy records an
// event in a ring, so waiting for copy `seq` waits on its event only (no device-wide sync).
#include <cuda_runtime.h>

#include <vector>

#include "strata/check.h"
#include "bench/cuda/transfer.h"

namespace strata::cuda {
namespace {

Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status();
  return Error(StatusCode::kIoError, "{}: {}", what, cudaGetErrorString(e));
}

class Direction {
 public:
  Status Init(size_t ring) {
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    events_.resize(ring);
    for (auto& e : events_)
      STRATA_RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
    return Status();
  }
  ~Direction() {
    for (auto e : events_)
      if (e) cudaEventDestroy(e);
    if (stream_) cudaStreamDestroy(stream_);
  }
  StatusOr<uint64_t> Copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    // The event slot is reused only after the copy that last used it completed.
    cudaEvent_t ev = events_[next_ % events_.size()];
    if (next_ >= events_.size()) STRATA_RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(ev), "cudaEventSynchronize"));
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(dst, src, bytes, kind, stream_), "cudaMemcpyAsync"));
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(ev, stream_), "cudaEventRecord"));
    return next_++;
  }
  Status Wait(uint64_t seq) {
    if (seq + events_.size() < next_) return Status();  // long done: its slot was reused after it completed
    return CudaStatus(cudaEventSynchronize(events_[seq % events_.size()]), "cudaEventSynchronize");
  }
  Status StreamWait(cudaStream_t consumer, uint64_t seq) {
    if (seq + events_.size() < next_) return Status();
    return CudaStatus(cudaStreamWaitEvent(consumer, events_[seq % events_.size()], 0), "cudaStreamWaitEvent");
  }

 private:
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> events_;
  uint64_t next_ = 0;
};

class CudaTransfer final : public Transfer {
 public:
  Status Init(int device) {
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
    STRATA_RETURN_IF_ERROR(h2d_.Init(64));
    return d2h_.Init(64);
  }
  StatusOr<uint64_t> ToDevice(void* dst, const void* src, size_t bytes) override {
    return h2d_.Copy(dst, src, bytes, cudaMemcpyHostToDevice);
  }
  StatusOr<uint64_t> ToHost(void* dst, const void* src, size_t bytes) override {
    return d2h_.Copy(dst, src, bytes, cudaMemcpyDeviceToHost);
  }
  Status WaitToDevice(uint64_t seq) override { return h2d_.Wait(seq); }
  Status WaitToHost(uint64_t seq) override { return d2h_.Wait(seq); }
  Status StreamWaitToDevice(void* consumer, uint64_t seq) override {
    return h2d_.StreamWait(static_cast<cudaStream_t>(consumer), seq);
  }

 private:
  Direction h2d_, d2h_;
};

}  // namespace

StatusOr<std::unique_ptr<Transfer>> MakeTransfer(int device) {
  auto t = std::make_unique<CudaTransfer>();
  STRATA_RETURN_IF_ERROR(t->Init(device));
  return std::unique_ptr<Transfer>(std::move(t));
}

StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes) {
  DeviceBuffer b;
  const cudaError_t e = cudaMalloc(&b.ptr_, bytes);
  if (e != cudaSuccess)
    return Error(StatusCode::kResourceExhausted, "cudaMalloc of {} bytes failed: {}", bytes, cudaGetErrorString(e));
  b.bytes_ = bytes;
  return b;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

}  // namespace strata::cuda
