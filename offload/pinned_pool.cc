#include "strata/pinned_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "strata/check.h"
#include "strata/log.h"

namespace strata {
namespace {

constexpr size_t kPage = 4096;
size_t RoundUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

StatusOr<std::byte*> MapHostMemory(size_t bytes, HostPages pages, bool populate) {
  bytes = RoundUp(bytes == 0 ? 1 : bytes, kPage);
  // Huge pages must be asked for before the pages are touched: MAP_POPULATE would fault in
  // 4 KiB pages that THP does not replace. Huge pages mean fewer TLB misses in Adam and
  // memcpy, and physically contiguous 1 MiB I/O buffers: a request of 256 scattered 4 KiB
  // pages exceeds a virtio disk's 254 segments and is split in two.
  const bool huge = pages == HostPages::kHuge && bytes >= (2u << 20);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | (huge || !populate ? 0 : MAP_POPULATE), -1, 0);
  if (p == MAP_FAILED) return ErrnoError(errno, "cannot allocate {} bytes of host memory", bytes);
  if (pages == HostPages::kSmall) madvise(p, bytes, MADV_NOHUGEPAGE);  // even where THP is "always"
  if (huge) madvise(p, bytes, MADV_HUGEPAGE);
  // In steps: populating holds the process's mmap lock, and an mmap on another thread (the
  // engine's blocks being made while the pools are populated) waited for all of it, 6 s cold.
  constexpr size_t kStep = size_t{8} << 20;
  for (size_t at = 0; huge && populate && at < bytes; at += kStep) {
    auto* chunk = static_cast<std::byte*>(p) + at;
    const size_t len = std::min(kStep, bytes - at);
    if (madvise(chunk, len, MADV_POPULATE_WRITE) != 0) {  // Linux < 5.14: touch every page
      auto* c = reinterpret_cast<volatile char*>(chunk);
      for (size_t i = 0; i < len; i += kPage) c[i] = 0;
    }
  }
  return static_cast<std::byte*>(p);
}
}  // namespace

StatusOr<std::byte*> AllocateHostMemory(size_t bytes, HostPages pages) { return MapHostMemory(bytes, pages, true); }

StatusOr<std::byte*> ReserveHostMemory(size_t bytes) { return MapHostMemory(bytes, HostPages::kHuge, false); }

uint64_t HugePageBytes(const std::byte* data, size_t bytes) {
  // smaps lists each mapping ("start-end perms ...") followed by its counters.
  std::ifstream in("/proc/self/smaps");
  std::string line;
  const auto lo = reinterpret_cast<uintptr_t>(data), hi = lo + bytes;
  bool inside = false;
  uint64_t total = 0;
  while (std::getline(in, line)) {
    uintptr_t start = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &start, &end) == 2 && line.find(':') > line.find(' ')) {
      inside = start < hi && end > lo;
    } else if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      total += std::strtoull(line.c_str() + 14, nullptr, 10) * 1024;
    }
  }
  return std::min<uint64_t>(total, bytes);
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

std::vector<std::span<std::byte>> PinnedPool::Regions(size_t max_bytes) const {
  const size_t per = std::max<size_t>(1, max_bytes / size_);
  std::vector<std::span<std::byte>> out;
  for (size_t i = 0; i < count_; i += per) out.push_back({base_ + i * size_, std::min(per, count_ - i) * size_});
  return out;
}

size_t PinnedPool::RegionBytes(size_t buffer_count, size_t buffer_size) {
  return buffer_count * RoundUp(buffer_size, kPage);
}

StatusOr<std::unique_ptr<PinnedPool>> PinnedPool::Create(size_t buffer_count, size_t buffer_size,
                                                         std::unique_ptr<HostPinner> pinner, HostPages pages) {
  if (buffer_count == 0 || buffer_size == 0)
    return InvalidArgument("pinned pool needs buffer_count > 0 and buffer_size > 0 (got {} x {})", buffer_count,
                           buffer_size);
  buffer_size = RoundUp(buffer_size, kPage);
  STRATA_ASSIGN_OR_RETURN(std::byte * base, AllocateHostMemory(buffer_count * buffer_size, pages));
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

std::optional<PinnedBuffer> PinnedPool::AcquireFor(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !free_.empty(); })) return std::nullopt;
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
