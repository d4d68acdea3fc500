// HostPinner: page-locks host memory, so that copies from and to it run at full speed and,
// on a GPU, asynchronously. Injected into the PinnedPool and the TieredStore's cpu tier:
// MakeMlockPinner() on the host (mlock, subject to RLIMIT_MEMLOCK), cuda::MakeCudaHostPinner()
// (cudaHostRegister) in the CUDA build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "strata/status.h"

namespace strata {

class HostPinner {
 public:
  virtual ~HostPinner() = default;
  virtual const char* name() const = 0;
  // Locks [data, data+bytes). An error means the memory stays usable but pageable. What a
  // pinner locks is counted in PageLockedByStrata(), whichever way it locks it.
  Status Pin(void* data, size_t bytes);
  // Undoes a Pin that succeeded, with the same range.
  void Unpin(void* data, size_t bytes);

 protected:
  virtual Status Lock(void* data, size_t bytes) = 0;
  virtual void Unlock(void* data, size_t bytes) = 0;
};

std::unique_ptr<HostPinner> MakeMlockPinner();

// A range kept page-locked by its pinner until destruction; empty where the pinner refused
// (the memory then stays usable, pageable). Destroy it before the memory it locks.
class PinnedRange {
 public:
  PinnedRange() = default;
  PinnedRange(std::shared_ptr<HostPinner> pinner, void* data, size_t bytes);
  PinnedRange(PinnedRange&& o) noexcept { *this = std::move(o); }
  PinnedRange& operator=(PinnedRange&& o) noexcept;
  ~PinnedRange() { Release(); }
  bool pinned() const { return pinner_ != nullptr; }
  // Why pinning was refused, for a warning; ok when pinned.
  const Status& refusal() const { return refusal_; }

 private:
  void Release();
  std::shared_ptr<HostPinner> pinner_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Status refusal_;
};

// Bytes this process holds page-locked through HostPinners: now, and the most at once since
// it started. The kernel's VmLck counts mlock alone; cudaHostRegister pins without it.
struct PageLockedBytes {
  uint64_t now = 0;
  uint64_t peak = 0;
};
PageLockedBytes PageLockedByStrata();

}  // namespace strata
