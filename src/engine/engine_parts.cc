// The engine's parts that own a behaviour of their own (engine_parts.h): the host arrays, the
// waits and releases of where the engine runs, the store's host memory.
#include "src/engine/engine_parts.h"

namespace strata {

HostArrays::~HostArrays() {
  for (auto [p, bytes] : allocs_) FreeHostMemory(p, bytes);
}

StatusOr<std::byte*> HostArrays::Allocate(size_t bytes) {
  STRATA_ASSIGN_OR_RETURN(std::byte * p, AllocateHostMemory(bytes));
  allocs_.push_back({p, bytes});
  return p;
}

StatusOr<std::byte*> HostArrays::Reserve(size_t bytes) {
  STRATA_ASSIGN_OR_RETURN(std::byte * p, ReserveHostMemory(bytes));
  allocs_.push_back({p, bytes});
  return p;
}

Status EngineIo::ComputeAfter(const Event& e, const char* what) const {
  Tracer::Span span(e.Ready() ? nullptr : tracer, Track::kWait, what);
  return dev->ComputeAfter(e);
}

void EngineIo::ReleaseAfter(PinnedBuffer lease, const Event& after) const {
  if (after.Ready()) return;  // the lease goes back now
  auto held = std::make_shared<PinnedBuffer>(std::move(lease));
  (void)dev->OnHost([held] {
    held->Release();
    return Status();
  }, {after});
}

const std::byte* StateStore::InHostMemory(TensorHandle h) const {
  return h.valid() && store->home(h) == Tier::kCpu ? store->CpuMemory(h).data() : nullptr;
}

}  // namespace strata
