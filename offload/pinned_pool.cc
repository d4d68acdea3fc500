#include "strata/pinned_pool.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include "strata/check.h"
#include "strata/log.h"

namespace strata {
namespace {

constexpr size_t kPage = 4096;
size_t RoundUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

class MlockPinner final : public HostPinner {
 public:
  const char* name() const override { return "mlock"; }
  Status Pin(void* data, size_t bytes) override {
    if (mlock(data, bytes) != 0) {
      int err = errno;
      rlimit lim{};
      getrlimit(RLIMIT_MEMLOCK, &lim);
      return ErrnoError(err, "mlock of {} bytes refused (RLIMIT_MEMLOCK soft limit {} bytes)", bytes,
                        lim.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : std::to_string(lim.rlim_cur));
    }
    return Status();
  }
  void Unpin(void* data, size_t bytes) override { munlock(data, bytes); }
};

}  // namespace

std::unique_ptr<HostPinner> MakeMlockPinner() { return std::make_unique<MlockPinner>(); }

StatusOr<std::byte*> AllocateHostMemory(size_t bytes) {
  bytes = RoundUp(bytes == 0 ? 1 : bytes, kPage);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) return ErrnoError(errno, "cannot allocate {} bytes of host memory", bytes);
  if (bytes >= (2u << 20)) madvise(p, bytes, MADV_HUGEPAGE);  // fewer TLB misses in Adam/memcpy
  return static_cast<std::byte*>(p);
}

void FreeHostMemory(std::byte* data, size_t bytes) {
  if (data) munmap(data, RoundUp(bytes == 0 ? 1 : bytes, kPage));
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = other.pool_;
    index_ = other.index_;
    data_ = other.data_;
    size_ = other.size_;
    other.pool_ = nullptr;
    other.data_ = nullptr;
  }
  return *this;
}

void PinnedBuffer::Release() {
  if (pool_) pool_->Return(index_);
  pool_ = nullptr;
  data_ = nullptr;
}

size_t PinnedPool::RegionBytes(size_t buffer_count, size_t buffer_size) {
  return buffer_count * RoundUp(buffer_size, kPage);
}

StatusOr<std::unique_ptr<PinnedPool>> PinnedPool::Create(size_t buffer_count, size_t buffer_size,
                                                         std::unique_ptr<HostPinner> pinner) {
  if (buffer_count == 0 || buffer_size == 0)
    return InvalidArgument("pinned pool needs buffer_count > 0 and buffer_size > 0 (got {} x {})", buffer_count,
                           buffer_size);
  buffer_size = RoundUp(buffer_size, kPage);
  STRATA_ASSIGN_OR_RETURN(std::byte * base, AllocateHostMemory(buffer_count * buffer_size));
  bool pinned = false;
  if (pinner) {
    Status s = pinner->Pin(base, buffer_count * buffer_size);
    if (s.ok()) {
      pinned = true;
    } else {
      LogOnce(LogLevel::kWarn, "pinned pool falls back to pageable memory: " + s.message());
    }
  }
  return std::unique_ptr<PinnedPool>(new PinnedPool(base, buffer_count, buffer_size, std::move(pinner), pinned));
}

PinnedPool::PinnedPool(std::byte* base, size_t count, size_t size, std::unique_ptr<HostPinner> pinner, bool pinned)
    : base_(base), count_(count), size_(size), pinner_(std::move(pinner)), pinned_(pinned) {
  free_.reserve(count);
  for (size_t i = count; i-- > 0;) free_.push_back(static_cast<int>(i));
}

PinnedPool::~PinnedPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    STRATA_CHECK(free_.size() == count_) << (count_ - free_.size()) << " pinned buffers still leased at pool destruction";
  }
  if (pinned_) pinner_->Unpin(base_, count_ * size_);
  FreeHostMemory(base_, count_ * size_);
}

PinnedBuffer PinnedPool::Acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !free_.empty(); });
  int i = free_.back();
  free_.pop_back();
  return PinnedBuffer(this, i, base_ + static_cast<size_t>(i) * size_, size_);
}

std::optional<PinnedBuffer> PinnedPool::TryAcquire() {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.empty()) return std::nullopt;
  int i = free_.back();
  free_.pop_back();
  return PinnedBuffer(this, i, base_ + static_cast<size_t>(i) * size_, size_);
}

size_t PinnedPool::free_count() {
  std::lock_guard<std::mutex> lock(mu_);
  return free_.size();
}

void PinnedPool::Return(int index) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(index);
  }
  cv_.notify_one();
}

}  // namespace strata
