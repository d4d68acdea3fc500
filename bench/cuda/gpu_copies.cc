// MeasureGpuCopies in a CUDA build: pinned (PinnedPool page-locked by cudaHostRegister) and
// pageable host memory against one device buffer, copied each round in all six ways, the
// order alternating between rounds; then the GPU's PCIe link from sysfs.
#include <cuda_runtime.h>

#include <cstring>
#include <functional>
#include <memory>

#include "bench/gpu_links.h"
#include "bench/cuda/transfer.h"
#include "strata/cuda/cuda.h"
#include "strata/pinned_pool.h"

namespace strata::bench {
namespace {

Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status();
  return Error(StatusCode::kIoError, "{}: {}", what, cudaGetErrorString(e));
}

struct Stream {
  cudaStream_t s = nullptr;
  ~Stream() {
    if (s) cudaStreamDestroy(s);
  }
};

struct Buffers {
  std::unique_ptr<PinnedPool> pool;
  PinnedBuffer pinned;
  std::unique_ptr<std::byte[]> pageable;
  cuda::DeviceBuffer device;
  std::unique_ptr<cuda::Transfer> transfer;
  Stream raw;
};

Status Allocate(const GpuLinkOptions& o, Buffers* b) {
  STRATA_ASSIGN_OR_RETURN(b->pool, PinnedPool::Create(1, o.bytes, cuda::MakeCudaHostPinner()));
  b->pinned = b->pool->Acquire();
  std::memset(b->pinned.data(), 1, o.bytes);
  b->pageable.reset(new std::byte[o.bytes]);
  std::memset(b->pageable.get(), 1, o.bytes);  // touched, so no first-touch faults are timed
  STRATA_ASSIGN_OR_RETURN(b->device, cuda::DeviceBuffer::Allocate(o.bytes));
  STRATA_ASSIGN_OR_RETURN(b->transfer, cuda::MakeTransfer(o.device));
  return CudaStatus(cudaStreamCreateWithFlags(&b->raw.s, cudaStreamNonBlocking), "cudaStreamCreate");
}

// Strata's path: block-sized copies on the Transfer's stream, then a wait on the last.
Status StoreCopy(Buffers& b, const GpuLinkOptions& o, bool h2d) {
  auto* dev = static_cast<std::byte*>(b.device.data());
  uint64_t last = 0;
  for (size_t off = 0; off < o.bytes; off += o.block) {
    const size_t n = std::min(o.block, o.bytes - off);
    STRATA_ASSIGN_OR_RETURN(last, h2d ? b.transfer->ToDevice(dev + off, b.pinned.data() + off, n)
                                      : b.transfer->ToHost(b.pinned.data() + off, dev + off, n));
  }
  return h2d ? b.transfer->WaitToDevice(last) : b.transfer->WaitToHost(last);
}

// The anchor: one cudaMemcpyAsync of all the bytes, from or to `host`.
Status RawCopy(Buffers& b, const GpuLinkOptions& o, bool h2d, std::byte* host) {
  STRATA_RETURN_IF_ERROR(CudaStatus(h2d ? cudaMemcpyAsync(b.device.data(), host, o.bytes, cudaMemcpyHostToDevice, b.raw.s)
                                        : cudaMemcpyAsync(host, b.device.data(), o.bytes, cudaMemcpyDeviceToHost, b.raw.s),
                                    "cudaMemcpyAsync"));
  return CudaStatus(cudaStreamSynchronize(b.raw.s), "cudaStreamSynchronize");
}

StatusOr<double> Timed(size_t bytes, const std::function<Status()>& copy) {
  const double t0 = NowSeconds();
  STRATA_RETURN_IF_ERROR(copy());
  return static_cast<double>(bytes) / (NowSeconds() - t0) / 1e9;
}

}  // namespace

StatusOr<GpuCopyFigures> MeasureGpuCopies(const GpuLinkOptions& o) {
  std::string why;
  if (!cuda::DeviceAvailable(&why)) return Error(StatusCode::kUnavailable, "GPU rows: {}", why);
  Buffers b;
  STRATA_RETURN_IF_ERROR(Allocate(o, &b));
  // Six ways, each a list of samples: Strata H2D, D2H; raw pinned H2D, D2H; pageable H2D, D2H.
  const std::function<Status()> ways[] = {
      [&] { return StoreCopy(b, o, true); },          [&] { return StoreCopy(b, o, false); },
      [&] { return RawCopy(b, o, true, b.pinned.data()); }, [&] { return RawCopy(b, o, false, b.pinned.data()); },
      [&] { return RawCopy(b, o, true, b.pageable.get()); }, [&] { return RawCopy(b, o, false, b.pageable.get()); }};
  constexpr int kWays = 6;
  std::vector<double> samples[kWays];
  STRATA_RETURN_IF_ERROR(ways[0]());  // warm-up: the first copy pays for context and mapping set-up
  for (int r = 0; r < o.rounds; ++r)
    for (int k = 0; k < kWays; ++k) {
      const int w = r % 2 == 0 ? k : kWays - 1 - k;
      STRATA_ASSIGN_OR_RETURN(double v, Timed(o.bytes, ways[w]));
      samples[w].push_back(v);
    }
  GpuCopyFigures f;
  f.store_h2d = Summarize(samples[0]), f.store_d2h = Summarize(samples[1]);
  f.raw_h2d = Summarize(samples[2]), f.raw_d2h = Summarize(samples[3]);
  f.pageable_h2d = Summarize(samples[4]), f.pageable_d2h = Summarize(samples[5]);
  f.pinned = b.pool->pinned();
  f.device_name = cuda::DeviceName(o.device);
  char bus_id[32] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, o.device) == cudaSuccess) f.pcie = ReadPcieLink(PciDeviceDir(bus_id));
  return f;
}

}  // namespace strata::bench
