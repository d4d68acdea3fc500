// HostPinner through cudaHostRegister: the PinnedPool's memory becomes page-locked and
// visible to every device, so cudaMemcpyAsync from it is a true DMA at full link speed.
#include <cuda_runtime.h>

#include "strata/cuda/cuda.h"

namespace strata::cuda {
namespace {

class CudaHostPinner final : public HostPinner {
 public:
  const char* name() const override { return "cudaHostRegister"; }

 protected:
  Status Lock(void* data, size_t bytes) override {
    const cudaError_t e = cudaHostRegister(data, bytes, cudaHostRegisterPortable);
    if (e != cudaSuccess)
      return Error(StatusCode::kUnavailable, "cudaHostRegister of {} bytes failed: {}", bytes, cudaGetErrorString(e));
    return Status();
  }
  void Unlock(void* data, size_t) override { cudaHostUnregister(data); }
};

}  // namespace

std::unique_ptr<HostPinner> MakeCudaHostPinner() { return std::make_unique<CudaHostPinner>(); }

bool DeviceAvailable(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = std::string("no CUDA device: ") + cudaGetErrorString(e);
    return false;
  }
  if (n == 0) {
    if (why) *why = "no CUDA device visible";
    return false;
  }
  return true;
}

uint64_t DeviceMemoryBytes(int device) {
  cudaDeviceProp prop;
  return cudaGetDeviceProperties(&prop, device) == cudaSuccess ? prop.totalGlobalMem : 0;
}

std::string DeviceName(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "";
  return prop.name;
}

}  // namespace strata::cuda
