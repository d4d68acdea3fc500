// HostPinner: page-locks host memory, so that copies from and to it run at full speed and,
// on a GPU, asynchronously. Injected into the PinnedPool and the TieredStore's cpu tier:
// MakeMlockPinner() on the host (mlock, subject to RLIMIT_MEMLOCK), cuda::MakeCudaHostPinner()
// (cudaHostRegister) in the CUDA build.
#pragma once

#include <cstddef>
#include <memory>

#include "strata/status.h"

namespace strata {

class HostPinner {
 public:
  virtual ~HostPinner() = default;
  virtual const char* name() const = 0;
  // Locks [data, data+bytes). An error means the memory stays usable but pageable.
  virtual Status Pin(void* data, size_t bytes) = 0;
  virtual void Unpin(void* data, size_t bytes) = 0;
};

std::unique_ptr<HostPinner> MakeMlockPinner();

}  // namespace strata
