// HostPinner's counted Pin/Unpin and the host's pinner (mlock). The count is the run's
// measured page-locked figure: VmLck misses cudaHostRegister's pinning (a GPU run read 0 B).
#include "strata/host_pinner.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <utility>

namespace strata {
namespace {

std::atomic<uint64_t> locked_now{0};
std::atomic<uint64_t> locked_peak{0};

class MlockPinner final : public HostPinner {
 public:
  const char* name() const override { return "mlock"; }

 protected:
  Status Lock(void* data, size_t bytes) override {
    if (mlock(data, bytes) != 0) {
      int err = errno;
      rlimit lim{};
      getrlimit(RLIMIT_MEMLOCK, &lim);
      return ErrnoError(err, "mlock of {} bytes refused (RLIMIT_MEMLOCK soft limit {} bytes)", bytes,
                        lim.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : std::to_string(lim.rlim_cur));
    }
    return Status();
  }
  void Unlock(void* data, size_t bytes) override { munlock(data, bytes); }
};

}  // namespace

Status HostPinner::Pin(void* data, size_t bytes) {
  Status s = Lock(data, bytes);
  if (!s.ok()) return s;
  const uint64_t now = locked_now.fetch_add(bytes) + bytes;
  uint64_t peak = locked_peak.load();
  while (now > peak && !locked_peak.compare_exchange_weak(peak, now)) {
  }
  return s;
}

void HostPinner::Unpin(void* data, size_t bytes) {
  Unlock(data, bytes);
  locked_now.fetch_sub(bytes);
}

PinnedRange::PinnedRange(std::shared_ptr<HostPinner> pinner, void* data, size_t bytes) {
  refusal_ = pinner->Pin(data, bytes);
  if (!refusal_.ok()) return;
  pinner_ = std::move(pinner);
  data_ = data;
  bytes_ = bytes;
}

PinnedRange& PinnedRange::operator=(PinnedRange&& o) noexcept {
  if (this == &o) return *this;
  Release();
  pinner_ = std::move(o.pinner_);
  data_ = std::exchange(o.data_, nullptr);
  bytes_ = std::exchange(o.bytes_, 0);
  refusal_ = std::move(o.refusal_);
  return *this;
}

void PinnedRange::Release() {
  if (pinner_) pinner_->Unpin(data_, bytes_);
  pinner_.reset();
}

std::unique_ptr<HostPinner> MakeMlockPinner() { return std::make_unique<MlockPinner>(); }

PageLockedBytes PageLockedByStrata() { return {locked_now.load(), locked_peak.load()}; }

}  // namespace strata
